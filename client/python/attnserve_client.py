#!/usr/bin/env python3
"""Sample Python client for attnserve (attnserve.v1.AttnServe): streaming generation, a
multi-turn session, portable sessions and error handling, with stubs generated from proto/
(README.md here). What each command writes to stdout, its finish and summary lines and its
error messages are those of the same `attnserve_client` command.
  generate --prompt=TEXT  stream the reply's bytes to stdout as they arrive, then a finish
                          line to stderr (--logprobs [--top_logprobs=N]: a line per token
                          and per alternative before it)
  chat TURN [TURN...]     on one new session (closed at the end), each TURN + "\\n" is a
                          turn and each reply ends with a newline
  sessions export ID FILE             the session's snapshot to FILE (- for stdout), then
                                      a summary line to stderr
  sessions import FILE [--ttl_seconds N]
                                      a new session from the snapshot in FILE (- for
                                      stdin): its id alone on stdout, a summary on stderr
  sessions fork ID [--ttl_seconds N]  a new session with a copy of ID's state: its id
Several replicas: calls that name a session send its id in the x-session-id header too,
for a load balancer that routes by it. A call refused with UNAVAILABLE (a replica
draining, or the session busy on another one) or cancelled by a replica that is stopping
(the client cancels none itself) is sent again, up to 8 attempts waiting
50 ms, 100 ms, 200 ms, ... (+-20%) within 10 s and the call's timeout: a turn only before
its first token, an export before its first chunk, an import only from a file. A turn on
a named session (--session, chat) that a server's shutdown stopped after some tokens is
continued by up to 3 turns with an empty prompt and max_tokens less the tokens received;
greedy output is then the same as without the stop, seeded output is not (each
continuation starts its sampler from the seed again).
TLS: --tls (system roots) or --tls_ca=FILE to verify the server, --tls_cert and --tls_key
for a client certificate (mutual TLS), --tls_server_name to override the name checked;
environment ATTNSERVE_TLS, ATTNSERVE_TLS_CA, ATTNSERVE_TLS_CLIENT_CERT, _KEY, _SERVER_NAME.
API keys: --api_key=KEY, or better ATTNSERVE_API_KEY (a command line is visible to other
users), is sent as `authorization: Bearer KEY` on every call.
Exit status: 0 ok; 1 an error status ("attnserve: CODE: message"), a turn that ended in
error, cancelled or stopped by a shutdown it could not continue, or a file that could not
be read or written; 2 bad command line; 3 no connection within --connect_timeout.
"""
import argparse
import collections
import contextlib
import errno
import os
import random
import sys
import tempfile
import time

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc

CHUNK = 1 << 20  # import sends at most this many snapshot bytes per message
UNARY_TIMEOUT = 10  # seconds, for create, close and fork
# Retry of refused calls, as the C++ client's (client/retry.h): attempts at most, first
# wait (doubling, +-20%), and no retry starting later than the budget after the first.
RETRY_ATTEMPTS, RETRY_FIRST_WAIT, RETRY_JITTER, RETRY_BUDGET = 8, 0.05, 0.2, 10.0
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
# Reconnect within a second, as the C++ client does: gRPC's default backoff (1 s, then
# 1.6x) would fail the retries fast for seconds after a restarted server is back.
RECONNECT = (("grpc.initial_reconnect_backoff_ms", 100),
             ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000))
MAX_CONTINUATIONS = 3  # turns continuing one that a server's shutdown stopped


class Failed(Exception):  # no error status, but a turn did not end by stop or length, an
    pass                  # export came up short, or a file could not be read or written


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                         "compression")), grpc.ClientCallDetails):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer KEY` to every call, as the C++ client does."""

    def __init__(self, key):
        self._header = ("authorization", f"Bearer {key}")

    def _with_key(self, d):
        return _CallDetails(d.method, d.timeout, tuple(d.metadata or ()) + (self._header,),
                            d.credentials, getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_key(details), request)

    intercept_unary_stream = intercept_unary_unary
    intercept_stream_unary = intercept_unary_unary
    intercept_stream_stream = intercept_unary_unary


def routed(session_id):
    """Metadata of a call that names a session: the header the load balancer routes by."""
    return (("x-session-id", session_id),) if session_id else ()


def with_retry(attempt, timeout, resend_ok=lambda: True):
    """Returns attempt(seconds left of `timeout`), calling it again after an UNAVAILABLE
    or CANCELLED error (a stopping server cancels the calls that reach it) while
    resend_ok() says the same request may be sent again and the bounds allow:
    RETRY_ATTEMPTS, RETRY_BUDGET, and none that would start past the deadline. Raises
    the last error."""
    start = time.monotonic()
    deadline = start + timeout
    for attempts in range(1, RETRY_ATTEMPTS + 1):
        try:
            return attempt(deadline - time.monotonic())
        except grpc.RpcError as error:
            wait = (RETRY_FIRST_WAIT * 2 ** (attempts - 1)
                    * random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER))
            resume = time.monotonic() + wait
            if (error.code() not in RETRIED or not resend_ok()
                    or attempts == RETRY_ATTEMPTS or resume > start + RETRY_BUDGET
                    or resume >= deadline):
                raise
            time.sleep(wait)


def stream_turn(stub, request, timeout, write, keep=None):
    """One Generate call, sent again while refused before its first token (after one,
    the same request would append its prompt twice). Calls write(bytes) per token and
    appends each Token message to the list keep, if given; returns (final message or
    None, tokens received)."""
    tokens = [0]

    def attempt(seconds):
        final = None
        for response in stub.Generate(request, timeout=seconds,
                                      metadata=routed(request.session_id)):
            if response.HasField("final"):
                final = response.final
            else:
                tokens[0] += 1
                write(response.token.text)
                if keep is not None:
                    keep.append(response.token)
        return final

    final = with_retry(attempt, timeout, lambda: tokens[0] == 0)
    return final, tokens[0]


def finish_line(final):
    u, reason = final.usage, pb.FinishReason.Name(final.reason)
    return (f"[finish={reason.removeprefix('FINISH_REASON_').lower()} "
            f"prompt_tokens={u.prompt_tokens} generated_tokens={u.generated_tokens} "
            f"position={u.session_position} ttft_ms={u.time_to_first_token_ms:.1f}]\n")


def c_hex_escape(data):
    """bytes as absl::CHexEscape writes them, for lines the C++ client prints alike."""
    named = {0x0a: "\\n", 0x0d: "\\r", 0x09: "\\t", 0x22: '\\"', 0x27: "\\'",
             0x5c: "\\\\"}
    return "".join(named.get(b) or (chr(b) if 0x20 <= b < 0x7f else f"\\x{b:02x}")
                   for b in data)


def logprob_lines(tokens):
    """generate --logprobs: a line per token, then one per alternative (--top_logprobs),
    as the C++ client prints them."""
    lines = []
    for t in tokens:
        logprob = f"{t.logprob:.4f}" if t.HasField("logprob") else "none"
        lines.append(f'[token id={t.id} logprob={logprob} text="{c_hex_escape(t.text)}"]\n')
        lines += [f'[alternative id={a.id} logprob={a.logprob:.4f} '
                  f'text="{c_hex_escape(a.text)}"]\n' for a in t.top_logprobs]
    return "".join(lines)


def run_turn(stub, args, text, session_id="", end_line=False):
    """Streams one turn's bytes to stdout (then a newline if end_line and they do not end
    with one) and its finish line to stderr. A turn on a named session that a server's
    shutdown stopped after some tokens (saved there; any replica continues it) is
    continued by up to MAX_CONTINUATIONS turns with an empty prompt and max_tokens less
    the tokens received; a one-turn session is gone, and before the first token the
    prompt may be only partly consumed. Raises grpc.RpcError or Failed."""
    sampling = pb.SamplingParams(temperature=args.temperature, seed=args.seed,
                                 max_tokens=args.max_tokens, ignore_eos=args.ignore_eos)
    logprobs = getattr(args, "logprobs", False)  # generate only, as in the C++ client
    request = pb.GenerateRequest(session_id=session_id, text=text, sampling=sampling,
                                 logprobs=logprobs,
                                 top_logprobs=getattr(args, "top_logprobs", 0))
    kept = [] if logprobs else None
    last = [b"\n"]

    def write(data):
        if data:  # special tokens (EOS) carry no bytes
            sys.stdout.buffer.write(data)
            sys.stdout.buffer.flush()
            last[0] = data[-1:]

    def end():
        if end_line and last[0] != b"\n":
            sys.stdout.buffer.write(b"\n")
            sys.stdout.buffer.flush()

    final, tokens = stream_turn(stub, request, args.timeout, write, kept)
    request.ClearField("prompt")
    for _ in range(MAX_CONTINUATIONS):
        if (final is None or final.reason != pb.FINISH_REASON_SHUTDOWN or not session_id
                or tokens == 0 or 0 < args.max_tokens <= tokens):
            break
        if args.max_tokens:
            request.sampling.max_tokens = args.max_tokens - tokens
        try:
            more, got = stream_turn(stub, request, args.timeout, write, kept)
        except grpc.RpcError:  # the stop, then why it could not be continued
            end()
            sys.stderr.write(finish_line(final))
            raise
        tokens += got
        if more is not None:  # one final for the whole turn
            more.usage.prompt_tokens = final.usage.prompt_tokens
            more.usage.generated_tokens += final.usage.generated_tokens
            more.usage.time_to_first_token_ms = final.usage.time_to_first_token_ms
        final = more
    end()
    if kept:
        sys.stderr.write(logprob_lines(kept))
    if final is None:
        raise Failed("attnserve: the stream ended without a final message")
    sys.stderr.write(finish_line(final))
    reason = pb.FinishReason.Name(final.reason)
    if final.reason == pb.FINISH_REASON_SHUTDOWN:  # stopped at a consistent position
        raise Failed("attnserve: generation stopped: the server is shutting down"
                     + (f": {final.error}" if final.error else ""))
    if final.reason not in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH):
        raise Failed(f"attnserve: generation ended: {reason} {final.error}".rstrip())


def chat(stub, args):
    # Sent again after UNAVAILABLE: a replica that created the session and then failed
    # leaves an orphan, which its TTL closes.
    session = with_retry(lambda seconds: stub.CreateSession(
        pb.CreateSessionRequest(), timeout=seconds), UNARY_TIMEOUT)
    print(f"[session {session.id}]", file=sys.stderr)
    try:  # each turn sends only its new text; the session holds the conversation
        for turn in args.turns:
            run_turn(stub, args, turn.encode() + b"\n", session.id, end_line=True)
    finally:
        with_retry(lambda seconds: stub.CloseSession(
            pb.CloseSessionRequest(session_id=session.id), timeout=seconds,
            metadata=routed(session.id)), UNARY_TIMEOUT)


def summary(n, start):  # "2.5 MiB (2621457 bytes) in 12.3 ms", sizes as the C++ client
    size, value = f"{n} B", n
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value /= 1024
        size = f"{value:.1f} {unit}"
    return f"{size} ({n} bytes) in {(time.monotonic() - start) * 1e3:.1f} ms"


def open_snapshot_file(args):
    """Before connecting: (file, temp path) for sessions export and import. An export goes
    to a temp file beside FILE (mode 0600), renamed over FILE once complete."""
    export = args.action == "export"
    try:
        if args.file == "-":
            return (sys.stdout.buffer if export else sys.stdin.buffer), None
        if not export:
            return open(args.file, "rb"), None
        if os.path.isdir(args.file):  # else os.replace refuses it only after the download
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        fd, temp = tempfile.mkstemp(dir=os.path.dirname(args.file) or ".",
                                    prefix=os.path.basename(args.file) + ".")
        return os.fdopen(fd, "wb"), temp
    except OSError as error:
        raise Failed(f"attnserve: cannot {'write' if export else 'read'} {args.file}: "
                     f"{error.strerror}") from None


def export_session(stub, args, out, temp):
    start, total, received = time.monotonic(), None, 0

    def attempt(seconds):
        nonlocal total, received
        for chunk in stub.ExportSession(pb.ExportSessionRequest(session_id=args.id),
                                        timeout=seconds, metadata=routed(args.id)):
            total = chunk.total_bytes if total is None else total
            out.write(chunk.data)
            received += len(chunk.data)

    try:
        with_retry(attempt, args.timeout, lambda: total is None)  # no chunk written yet
        if total and received != total:
            raise Failed(f"attnserve: the export of {args.id} ended after {received} of "
                         f"{total} bytes")
        out.flush()
        if temp:
            os.fsync(out.fileno())
            out.close()
            os.replace(temp, args.file)
    except OSError as error:
        raise Failed(f"attnserve: cannot write {args.file}: {error.strerror}") from None
    where = args.file if temp else "stdout"
    print(f"exported {args.id} to {where}: {summary(received, start)}", file=sys.stderr)


def import_session(stub, args, source):
    start, read_error, counts = time.monotonic(), [], []
    # Only a file can be sent again from its first byte; stdin is gone.
    rewindable = args.file != "-" and source.seekable()

    def requests(sent):  # on a gRPC thread: a read error ends the stream, reported below
        first, offset = True, 0
        while True:
            try:  # pread: the thread of a refused attempt may still be reading the file
                data = (os.pread(source.fileno(), CHUNK, offset) if rewindable
                        else source.read(CHUNK))
            except OSError as error:
                return read_error.append(error)
            if not data and not first:  # an empty FILE still sends one message
                return
            offset += len(data)
            sent[0] += len(data)
            yield pb.ImportSessionRequest(data=data,
                                          ttl_seconds=args.ttl_seconds if first else 0)
            first = False

    def attempt(seconds):
        counts.append([0])
        return stub.ImportSession(requests(counts[-1]), timeout=seconds)

    try:  # a replica that imported and then failed leaves an orphan, as with create
        session = with_retry(attempt, args.timeout, lambda: rewindable and not read_error)
    finally:
        if read_error:
            raise Failed(f"attnserve: cannot read {args.file}: {read_error[0].strerror}")
    print(session.id)
    where = "stdin" if args.file == "-" else args.file
    print(f"imported {session.id} from {where}: {summary(counts[-1][0], start)}, "
          f"position {session.position}", file=sys.stderr)


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=os.environ.get("ATTNSERVE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--timeout", type=float, default=300,
                        help="deadline of a turn, an export or an import, s")
    parser.add_argument("--connect_timeout", type=float, default=3)
    parser.add_argument("--api_key", default=os.environ.get("ATTNSERVE_API_KEY", ""),
                        metavar="KEY",
                        help="API key of a server run with --api_keys_file (env "
                             "ATTNSERVE_API_KEY, which other users cannot see)")
    env = os.environ.get
    parser.add_argument("--tls", action="store_true",
                        default=env("ATTNSERVE_TLS", "").lower() in ("1", "true", "yes"),
                        help="connect over TLS (implied by the other --tls_* flags)")
    parser.add_argument("--tls_ca", default=env("ATTNSERVE_TLS_CA", ""), metavar="FILE",
                        help="PEM CA certificates that verify the server (default: "
                             "grpcio's roots)")
    parser.add_argument("--tls_cert", default=env("ATTNSERVE_TLS_CLIENT_CERT", ""),
                        metavar="FILE", help="PEM client certificate (mutual TLS)")
    parser.add_argument("--tls_key", default=env("ATTNSERVE_TLS_CLIENT_KEY", ""),
                        metavar="FILE", help="PEM private key of --tls_cert")
    parser.add_argument("--tls_server_name", default=env("ATTNSERVE_TLS_SERVER_NAME", ""),
                        help="name the server's certificate must carry, if not the host "
                             "of --server")
    commands = parser.add_subparsers(dest="command", required=True)
    generate, chat_parser = commands.add_parser("generate"), commands.add_parser("chat")
    for p in (generate, chat_parser):
        p.add_argument("--max_tokens", type=int, default=0, help="0: the server's default")
        p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--ignore_eos", action="store_true",
                       help="generate past an end-of-sequence token, up to --max_tokens")
    generate.add_argument("--prompt", required=True)
    generate.add_argument("--session", default="", help="continue this session")
    generate.add_argument("--logprobs", action="store_true",
                          help="ask for the model's log p(token); a line per token")
    generate.add_argument("--top_logprobs", type=int, default=0, metavar="N",
                          help="with --logprobs: also the N most likely tokens at each "
                               "position (0..20)")
    chat_parser.add_argument("turns", nargs="+")
    sessions = commands.add_parser("sessions").add_subparsers(dest="action", required=True)
    export = sessions.add_parser("export", help="snapshot to FILE (- for stdout)")
    import_ = sessions.add_parser("import", help="new session from FILE (- for stdin)")
    fork = sessions.add_parser("fork", help="new session with a copy of ID's state")
    export.add_argument("id", metavar="ID")
    export.add_argument("file", metavar="FILE")
    import_.add_argument("file", metavar="FILE")
    fork.add_argument("id", metavar="ID")
    for p in (import_, fork):
        p.add_argument("--ttl_seconds", type=int, default=0, metavar="N",
                       help="idle seconds before the new session is closed; 0: the "
                            "server's default (import), the original's (fork)")
    return parser.parse_args()


def open_channel(args):
    """A channel to args.server: plaintext, or TLS when any --tls* flag is given (as the
    C++ client). Raises Failed when a TLS file cannot be read."""
    if not (args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name):
        return grpc.insecure_channel(args.server, options=RECONNECT)
    if bool(args.tls_cert) != bool(args.tls_key):
        raise Failed("attnserve: --tls_cert and --tls_key go together (the client "
                     "certificate and its key)")
    pem = {}
    for flag in ("tls_ca", "tls_cert", "tls_key"):
        path = getattr(args, flag)
        try:
            if path:
                with open(path, "rb") as file:
                    pem[flag] = file.read()
            else:
                pem[flag] = None
        except OSError as error:
            raise Failed(f"attnserve: cannot read --{flag} file {path}: "
                         f"{error.strerror}") from None
    credentials = grpc.ssl_channel_credentials(pem["tls_ca"], pem["tls_key"], pem["tls_cert"])
    options = RECONNECT
    if args.tls_server_name:
        options += (("grpc.ssl_target_name_override", args.tls_server_name),)
    return grpc.secure_channel(args.server, credentials, options=options)


def run(stub, args, snapshot_file, temp):
    if args.command == "generate":
        run_turn(stub, args, args.prompt.encode(), args.session)
    elif args.command == "chat":
        chat(stub, args)
    elif args.action == "export":
        export_session(stub, args, snapshot_file, temp)
    elif args.action == "import":
        import_session(stub, args, snapshot_file)
    else:
        request = pb.ForkSessionRequest(session_id=args.id, ttl_seconds=args.ttl_seconds)
        print(with_retry(lambda seconds: stub.ForkSession(
            request, timeout=seconds, metadata=routed(args.id)), UNARY_TIMEOUT).id)


def main():
    args = parse_args()
    snapshot_file = temp = None
    try:
        if args.command == "sessions" and args.action != "fork":
            snapshot_file, temp = open_snapshot_file(args)  # a bad FILE fails at once
        channel = open_channel(args)
        if args.api_key:
            channel = grpc.intercept_channel(channel, _Bearer(args.api_key))
        with channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=args.connect_timeout)
            except grpc.FutureTimeoutError:
                print(f"attnserve: no connection to {args.server} within "
                      f"{args.connect_timeout:g} s", file=sys.stderr)
                return 3
            run(pb_grpc.AttnServeStub(channel), args, snapshot_file, temp)
            return 0
    except grpc.RpcError as error:  # e.g. INVALID_ARGUMENT, naming the field
        print(f"attnserve: {error.code().name}: {error.details()}", file=sys.stderr)
    except Failed as error:
        print(error, file=sys.stderr)
    finally:  # never half a FILE: once renamed, the temp file is gone
        if temp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    return 1


if __name__ == "__main__":
    sys.exit(main())
