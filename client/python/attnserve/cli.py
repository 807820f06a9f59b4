"""attnserve (also `python3 -m attnserve`, and client/python/attnserve_client.py): the
command line of the Python client. What each command writes to stdout, its finish and
summary lines and its error messages are those of the same `attnserve_client` command.
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
import contextlib
import errno
import os
import sys
import tempfile
import time

from . import _channel
from ._client import Client, UNARY_TIMEOUT
from ._rpc import Error
from .v1 import attnserve_pb2 as pb
from .v1 import attnserve_pb2_grpc as pb_grpc  # noqa: F401 (tests replace its stub)

# gRPC channel options of every channel the command line opens (tests add their own).
RECONNECT = _channel.RECONNECT
MAX_CONTINUATIONS = 3  # turns continuing one that a server's shutdown stopped


class Failed(Exception):  # no error status, but a turn did not end by stop or length, or
    pass                  # a file could not be read or written


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


def stream_turn(generation, write, keep):
    """Reads one Generation: write(bytes) per token, each Token appended to the list
    keep if given; returns (final message or None, tokens received)."""
    for token in generation:
        write(token.text)
        if keep is not None:
            keep.append(token)
    return generation.final, generation.token_count


def run_turn(client, args, text, session_id="", end_line=False):
    """Streams one turn's bytes to stdout (then a newline if end_line and they do not end
    with one) and its finish line to stderr. A turn on a named session that a server's
    shutdown stopped after some tokens (saved there; any replica continues it) is
    continued by up to MAX_CONTINUATIONS turns with no prompt and max_tokens less the
    tokens received; a one-turn session is gone, and before the first token the prompt
    may be only partly consumed. Raises Error or Failed."""
    logprobs = getattr(args, "logprobs", False)  # generate only, as in the C++ client
    options = dict(session=session_id, temperature=args.temperature, seed=args.seed,
                   ignore_eos=args.ignore_eos, logprobs=logprobs,
                   top_logprobs=getattr(args, "top_logprobs", 0), timeout=args.timeout)
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

    final, tokens = stream_turn(
        client.generate(text, max_tokens=args.max_tokens, **options), write, kept)
    for _ in range(MAX_CONTINUATIONS):
        if (final is None or final.reason != pb.FINISH_REASON_SHUTDOWN or not session_id
                or tokens == 0 or 0 < args.max_tokens <= tokens):
            break
        max_tokens = args.max_tokens - tokens if args.max_tokens else 0
        try:
            more, got = stream_turn(
                client.generate(None, max_tokens=max_tokens, **options), write, kept)
        except Error:  # the stop, then why it could not be continued
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


def chat(client, args):
    session = client.sessions.create(timeout=UNARY_TIMEOUT)
    print(f"[session {session.id}]", file=sys.stderr)
    try:  # each turn sends only its new text; the session holds the conversation
        for turn in args.turns:
            run_turn(client, args, turn.encode() + b"\n", session.id, end_line=True)
    finally:
        client.sessions.close(session.id, timeout=UNARY_TIMEOUT)


def summary(n, start):  # "2.5 MiB (2621457 bytes) in 12.3 ms", sizes as the C++ client
    size, value = f"{n} B", n
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        if value < 1024:
            break
        value /= 1024
        size = f"{value:.1f} {unit}"
    return f"{size} ({n} bytes) in {(time.monotonic() - start) * 1e3:.1f} ms"


class _Counted:
    """stdin for sessions import: read once, in order (not seekable, so never sent
    again), counting the bytes read."""

    def __init__(self, file):
        self._file, self.count = file, 0

    def read(self, n):
        data = self._file.read(n)
        self.count += len(data)
        return data


def open_snapshot_file(args):
    """Before connecting: (file, temp path) for sessions export and import. An export goes
    to a temp file beside FILE (mode 0600), renamed over FILE once complete."""
    export = args.action == "export"
    try:
        if args.file == "-":
            return (sys.stdout.buffer if export else _Counted(sys.stdin.buffer)), None
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


def export_session(client, args, out, temp):
    start = time.monotonic()
    try:
        received = client.sessions.export(args.id, out, timeout=args.timeout)
        out.flush()
        if temp:
            os.fsync(out.fileno())
            out.close()
            os.replace(temp, args.file)
    except OSError as error:
        raise Failed(f"attnserve: cannot write {args.file}: {error.strerror}") from None
    where = args.file if temp else "stdout"
    print(f"exported {args.id} to {where}: {summary(received, start)}", file=sys.stderr)


def import_session(client, args, source):
    start = time.monotonic()
    try:  # a file is sent again after a refusal, from its first byte; stdin cannot be
        session = client.sessions.import_(source, ttl_seconds=args.ttl_seconds,
                                          timeout=args.timeout)
        sent = source.count if args.file == "-" else os.fstat(source.fileno()).st_size
    except OSError as error:
        raise Failed(f"attnserve: cannot read {args.file}: {error.strerror}") from None
    print(session.id)
    where = "stdin" if args.file == "-" else args.file
    print(f"imported {session.id} from {where}: {summary(sent, start)}, "
          f"position {session.position}", file=sys.stderr)


def parse_args(argv=None):
    prog = os.path.basename(sys.argv[0])
    parser = argparse.ArgumentParser(
        prog="attnserve" if prog == "__main__.py" else prog, description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    env = os.environ.get
    parser.add_argument("--server", default=env("ATTNSERVE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--timeout", type=float, default=300,
                        help="deadline of a turn, an export or an import, s")
    parser.add_argument("--connect_timeout", type=float, default=3)
    parser.add_argument("--api_key", default=env("ATTNSERVE_API_KEY", ""), metavar="KEY",
                        help="API key of a server run with --api_keys_file (env "
                             "ATTNSERVE_API_KEY, which other users cannot see)")
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
    return parser.parse_args(argv)


def open_client(args):
    """A Client of args.server: plaintext, or TLS when any --tls* flag is given (as the
    C++ client). Raises Failed when a TLS file cannot be read."""
    tls = {}
    if args.tls or args.tls_ca or args.tls_cert or args.tls_key or args.tls_server_name:
        if bool(args.tls_cert) != bool(args.tls_key):
            raise Failed("attnserve: --tls_cert and --tls_key go together (the client "
                         "certificate and its key)")
        for flag in ("tls_ca", "tls_cert", "tls_key"):  # read here, to name the flag
            path = getattr(args, flag)
            try:
                if path:
                    with open(path, "rb") as file:
                        tls[flag] = file.read()
            except OSError as error:
                raise Failed(f"attnserve: cannot read --{flag} file {path}: "
                             f"{error.strerror}") from None
        tls = dict(tls=tls.get("tls_ca", True), tls_cert=tls.get("tls_cert"),
                   tls_key=tls.get("tls_key"), tls_server_name=args.tls_server_name or None)
    return Client(args.server, api_key=args.api_key, options=RECONNECT, **tls)


def run(client, args, snapshot_file, temp):
    if args.command == "generate":
        run_turn(client, args, args.prompt.encode(), args.session)
    elif args.command == "chat":
        chat(client, args)
    elif args.action == "export":
        export_session(client, args, snapshot_file, temp)
    elif args.action == "import":
        import_session(client, args, snapshot_file)
    else:
        print(client.sessions.fork(args.id, ttl_seconds=args.ttl_seconds,
                                   timeout=UNARY_TIMEOUT).id)


def main(argv=None):
    args = parse_args(argv)
    snapshot_file = temp = None
    try:
        if args.command == "sessions" and args.action != "fork":
            snapshot_file, temp = open_snapshot_file(args)  # a bad FILE fails at once
        with open_client(args) as client:
            try:
                client.wait_ready(args.connect_timeout)
            except Error as error:
                print(f"attnserve: {error.details}", file=sys.stderr)
                return 3
            run(client, args, snapshot_file, temp)
            return 0
    except Error as error:  # e.g. INVALID_ARGUMENT, naming the field
        print(f"attnserve: {error.code.name}: {error.details}", file=sys.stderr)
    except Failed as error:
        print(error, file=sys.stderr)
    finally:  # never half a FILE: once renamed, the temp file is gone
        if temp:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)
    return 1
