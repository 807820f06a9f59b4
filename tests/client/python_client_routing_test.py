#!/usr/bin/python3
"""The Python client (client/python/attnserve_client.py) against a scripted fake
AttnServe on an ephemeral port: the x-session-id header on every call that names a
session, UNAVAILABLE sent again only while it is safe and within the deadline, and a turn
stopped by a server's shutdown continued on a named session. Stubs are generated from
proto/ by Debian's protoc and grpc_python_plugin, as tests/e2e/python_client_test.sh
does; run with Debian's /usr/bin/python3 (python3-grpcio, python3-protobuf)."""
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from concurrent import futures

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CLIENT = os.path.join(REPO, "client", "python", "attnserve_client.py")
STUBS = tempfile.mkdtemp(prefix="python_client_routing_test.")


def generate_stubs():
    plugin = shutil.which("grpc_python_plugin")
    if plugin is None:
        sys.exit("grpc_python_plugin not found (protobuf-compiler-grpc)")
    subprocess.run(["protoc", f"--python_out={STUBS}", f"--grpc_python_out={STUBS}",
                    f"--plugin=protoc-gen-grpc_python={plugin}", "-I",
                    os.path.join(REPO, "proto"), "attnserve/v1/attnserve.proto",
                    "attnserve/v1/model_config.proto"], check=True)
    sys.path.insert(0, STUBS)


generate_stubs()
import grpc  # noqa: E402
from attnserve.v1 import attnserve_pb2 as pb  # noqa: E402
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc  # noqa: E402

SHUTTING_DOWN = "the server is shutting down; no new turns"


class FakeAttnServe(pb_grpc.AttnServeServicer):
    """Answers from a script and records every call with its x-session-id header."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls = []        # (method, x-session-id or None)
        self.generate = []     # GenerateRequest, refused ones included
        self.refusals = 0      # the next calls of any method answer UNAVAILABLE
        self.scripts = []      # per Generate call: (tokens, error code or None, reason)
        self.default = (["Hel", "lo"], None, pb.FINISH_REASON_LENGTH)
        self.sessions = 0

    def arrive(self, method, context):
        header = dict(context.invocation_metadata()).get("x-session-id")
        with self.lock:
            self.calls.append((method, header))
            refuse, self.refusals = self.refusals > 0, max(0, self.refusals - 1)
        if refuse:
            context.abort(grpc.StatusCode.UNAVAILABLE, SHUTTING_DOWN)

    def Generate(self, request, context):
        with self.lock:
            self.generate.append(request)
        self.arrive("Generate", context)
        with self.lock:
            tokens, code, reason = self.scripts.pop(0) if self.scripts else self.default
        for i, text in enumerate(tokens):
            token = pb.Token(text=text.encode(), id=100 + i)
            if request.logprobs:  # as tests/client/fake_server.h scripts them
                token.logprob = -0.5
                for k in range(request.top_logprobs):
                    alternative = text if k == 0 else chr(ord("a") + k)
                    token.top_logprobs.add(id=100 + i + k, logprob=-0.5 - k,
                                           text=alternative.encode())
            yield pb.GenerateResponse(token=token)
        if code is not None:
            context.abort(code, SHUTTING_DOWN)
        usage = pb.Usage(prompt_tokens=len(request.text), generated_tokens=len(tokens),
                         session_position=70 + len(request.text),
                         time_to_first_token_ms=1.5)
        yield pb.GenerateResponse(final=pb.Final(reason=reason, usage=usage,
                                                 session_id=request.session_id))

    def CreateSession(self, request, context):
        self.arrive("CreateSession", context)
        with self.lock:
            self.sessions += 1
            return pb.Session(id=f"s{self.sessions}")

    def CloseSession(self, request, context):
        self.arrive("CloseSession", context)
        return pb.CloseSessionResponse()

    def ForkSession(self, request, context):
        self.arrive("ForkSession", context)
        return pb.Session(id="f1")

    def ExportSession(self, request, context):
        self.arrive("ExportSession", context)
        yield pb.SnapshotChunk(data=b"snapshot", total_bytes=8)

    def ImportSession(self, request_iterator, context):
        self.arrive("ImportSession", context)
        data = b"".join(r.data for r in request_iterator)
        return pb.Session(id="i1", position=len(data))


class PythonClientRoutingTest(unittest.TestCase):
    def setUp(self):
        self.fake = FakeAttnServe()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_AttnServeServicer_to_server(self.fake, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.dir = tempfile.mkdtemp(prefix="python_client_routing_test.")

    def tearDown(self):
        self.server.stop(None)
        shutil.rmtree(self.dir)

    def client(self, *args, timeout=None):
        """Runs the client; returns (exit code, stdout bytes, stderr text)."""
        argv = [sys.executable, CLIENT, f"--server=127.0.0.1:{self.port}"]
        argv += [f"--timeout={timeout}"] if timeout else []
        run = subprocess.run(argv + list(args), capture_output=True, timeout=60,
                             env=dict(os.environ, PYTHONPATH=STUBS))
        return run.returncode, run.stdout, run.stderr.decode()

    def test_calls_naming_a_session_send_its_id_as_header(self):
        snap = os.path.join(self.dir, "s.snap")
        for args in (["generate", "--session=s7", "--prompt=x"], ["generate", "--prompt=x"],
                     ["chat", "hi"], ["sessions", "fork", "s7"],
                     ["sessions", "export", "s7", snap], ["sessions", "import", snap]):
            code, _, err = self.client(*args)
            self.assertEqual(code, 0, f"{args}: {err}")
        self.assertEqual(self.fake.calls, [
            ("Generate", "s7"), ("Generate", None), ("CreateSession", None),
            ("Generate", "s1"), ("CloseSession", "s1"), ("ForkSession", "s7"),
            ("ExportSession", "s7"), ("ImportSession", None)])

    def test_refused_turn_is_sent_again_and_printed_once(self):
        self.fake.refusals = 2
        code, out, err = self.client("generate", "--session=s1", "--prompt=Hi")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"Hello")
        self.assertEqual(err, "[finish=length prompt_tokens=2 generated_tokens=2 "
                              "position=72 ttft_ms=1.5]\n")
        self.assertEqual(len(self.fake.generate), 3)
        self.assertTrue(all(r == self.fake.generate[0] for r in self.fake.generate))
        self.assertEqual(self.fake.calls, [("Generate", "s1")] * 3)

    def test_generate_logprobs_print_as_the_cpp_client_prints_them(self):
        self.fake.default = (["A", "\n"], None, pb.FINISH_REASON_LENGTH)
        code, out, err = self.client("generate", "--logprobs", "--top_logprobs=2",
                                     "--prompt=x")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"A\n")
        self.assertTrue(self.fake.generate[0].logprobs)
        self.assertEqual(self.fake.generate[0].top_logprobs, 2)
        self.assertEqual(err, '[token id=100 logprob=-0.5000 text="A"]\n'
                              '[alternative id=100 logprob=-0.5000 text="A"]\n'
                              '[alternative id=101 logprob=-1.5000 text="b"]\n'
                              '[token id=101 logprob=-0.5000 text="\\n"]\n'
                              '[alternative id=101 logprob=-0.5000 text="\\n"]\n'
                              '[alternative id=102 logprob=-1.5000 text="b"]\n'
                              "[finish=length prompt_tokens=1 generated_tokens=2 "
                              "position=71 ttft_ms=1.5]\n")

    def test_turn_is_not_sent_again_after_a_token(self):
        self.fake.default = (["Hel"], grpc.StatusCode.UNAVAILABLE, pb.FINISH_REASON_LENGTH)
        code, out, err = self.client("generate", "--session=s1", "--prompt=Hi")
        self.assertEqual(code, 1)
        self.assertEqual(out, b"Hel")
        self.assertEqual(err, f"attnserve: UNAVAILABLE: {SHUTTING_DOWN}\n")
        self.assertEqual(len(self.fake.generate), 1)

    # Waits of at most 60, 120 and 240 ms fit in 550 ms; a fourth of at least 320 ms
    # would end past it (40 + 80 + 160 + 320 = 600).
    def test_retries_stop_at_the_deadline_with_the_last_error(self):
        self.fake.refusals = 100
        code, out, err = self.client("generate", "--session=s1", "--prompt=x",
                                     timeout=0.55)
        self.assertEqual(code, 1)
        self.assertEqual(out, b"")
        self.assertEqual(err, f"attnserve: UNAVAILABLE: {SHUTTING_DOWN}\n")
        self.assertEqual(len(self.fake.calls), 4)

    def test_shutdown_after_tokens_of_a_named_session_is_continued(self):
        self.fake.scripts = [(["a", "b", "c"], None, pb.FINISH_REASON_SHUTDOWN)]
        self.fake.default = (["d", "e"], None, pb.FINISH_REASON_LENGTH)
        code, out, err = self.client("generate", "--session=s9", "--max_tokens=10",
                                     "--seed=7", "--temperature=0.5", "--prompt=Hi")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"abcde")
        self.assertEqual(err, "[finish=length prompt_tokens=2 generated_tokens=5 "
                              "position=70 ttft_ms=1.5]\n")
        first, nxt = self.fake.generate
        self.assertIsNone(nxt.WhichOneof("prompt"))
        self.assertEqual(nxt.session_id, "s9")
        self.assertEqual(nxt.sampling.max_tokens, 7)
        self.assertEqual(nxt.sampling.seed, 7)
        self.assertEqual(nxt.sampling.temperature, first.sampling.temperature)

    def test_continuation_cancelled_by_the_stopping_server_is_sent_again(self):
        self.fake.scripts = [(["a"], None, pb.FINISH_REASON_SHUTDOWN),
                             ([], grpc.StatusCode.CANCELLED, None)]
        self.fake.default = (["b"], None, pb.FINISH_REASON_LENGTH)
        code, out, err = self.client("generate", "--session=s9", "--prompt=x")
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"ab")
        self.assertEqual(len(self.fake.generate), 3)

    def test_shutdown_of_a_one_turn_session_is_reported(self):
        self.fake.default = (["a"], None, pb.FINISH_REASON_SHUTDOWN)
        code, out, err = self.client("generate", "--max_tokens=10", "--prompt=Hi")
        self.assertEqual(code, 1)
        self.assertEqual(out, b"a")
        self.assertTrue(err.endswith(
            "attnserve: generation stopped: the server is shutting down\n"), err)
        self.assertEqual(len(self.fake.generate), 1)

    def test_continues_at_most_three_times(self):
        self.fake.default = (["t"], None, pb.FINISH_REASON_SHUTDOWN)
        code, out, err = self.client("chat", "--max_tokens=10", "q")
        self.assertEqual(code, 1)
        self.assertEqual(out, b"tttt\n")
        self.assertEqual([r.sampling.max_tokens for r in self.fake.generate],
                         [10, 9, 8, 7])
        self.assertEqual(self.fake.calls[-1], ("CloseSession", "s1"))

    def test_import_from_a_file_is_sent_again_from_its_start(self):
        snap = os.path.join(self.dir, "in.snap")
        with open(snap, "wb") as f:
            f.write(bytes(range(256)) * 5000)  # two messages
        self.fake.refusals = 1
        code, out, err = self.client("sessions", "import", snap)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, b"i1\n")
        self.assertIn("(1280000 bytes)", err)
        self.assertIn("position 1280000", err)  # the fake got every byte once


if __name__ == "__main__":
    try:
        unittest.main(verbosity=2)
    finally:
        shutil.rmtree(STUBS, ignore_errors=True)
