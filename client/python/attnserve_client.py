#!/usr/bin/env python3
"""Sample Python client for attnserve (attnserve.v1.AttnServe): streaming generation, a
multi-turn session, portable sessions and error handling, with stubs generated from proto/
(README.md here). What each command writes to stdout, its finish and summary lines and its
error messages are those of the same `attnserve_client` command.
  generate --prompt=TEXT  stream the reply's bytes to stdout as they arrive, then a finish
                          line to stderr
  chat TURN [TURN...]     on one new session (closed at the end), each TURN + "\\n" is a
                          turn and each reply ends with a newline
  sessions export ID FILE             the session's snapshot to FILE (- for stdout), then
                                      a summary line to stderr
  sessions import FILE [--ttl_seconds N]
                                      a new session from the snapshot in FILE (- for
                                      stdin): its id alone on stdout, a summary on stderr
  sessions fork ID [--ttl_seconds N]  a new session with a copy of ID's state: its id
Exit status: 0 ok; 1 an error status ("attnserve: CODE: message"), a turn that ended in
error, cancelled or stopped by a shutdown, or a file that could not be read or written;
2 bad command line; 3 no connection within --connect_timeout.
"""
import argparse
import contextlib
import errno
import os
import sys
import tempfile
import time

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc

CHUNK = 1 << 20  # import sends at most this many snapshot bytes per message


class Failed(Exception):  # no error status, but a turn did not end by stop or length, an
    pass                  # export came up short, or a file could not be read or written


def run_turn(stub, args, text, session_id="", end_line=False):
    """Streams one Generate turn's bytes to stdout (then a newline if end_line and they do
    not end with one) and its finish line to stderr. Raises grpc.RpcError or Failed."""
    sampling = pb.SamplingParams(temperature=args.temperature, seed=args.seed,
                                 max_tokens=args.max_tokens)
    request = pb.GenerateRequest(session_id=session_id, text=text, sampling=sampling)
    final, last = None, b"\n"
    for response in stub.Generate(request, timeout=args.timeout):
        if response.HasField("final"):
            final = response.final
        elif response.token.text:  # special tokens (EOS) carry no bytes
            sys.stdout.buffer.write(response.token.text)
            sys.stdout.buffer.flush()
            last = response.token.text[-1:]
    if end_line and last != b"\n":
        sys.stdout.buffer.write(b"\n")
        sys.stdout.buffer.flush()
    if final is None:
        raise Failed("attnserve: the stream ended without a final message")
    u, reason = final.usage, pb.FinishReason.Name(final.reason)
    sys.stderr.write(f"[finish={reason.removeprefix('FINISH_REASON_').lower()} "
                     f"prompt_tokens={u.prompt_tokens} generated_tokens={u.generated_tokens} "
                     f"position={u.session_position} ttft_ms={u.time_to_first_token_ms:.1f}]\n")
    if final.reason == pb.FINISH_REASON_SHUTDOWN:  # stopped at a consistent position
        raise Failed("attnserve: generation stopped: the server is shutting down"
                     + (f": {final.error}" if final.error else ""))
    if final.reason not in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH):
        raise Failed(f"attnserve: generation ended: {reason} {final.error}".rstrip())


def chat(stub, args):
    session = stub.CreateSession(pb.CreateSessionRequest(), timeout=10)
    print(f"[session {session.id}]", file=sys.stderr)
    try:  # each turn sends only its new text; the session holds the conversation
        for turn in args.turns:
            run_turn(stub, args, turn.encode() + b"\n", session.id, end_line=True)
    finally:
        stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=10)


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
    try:
        for chunk in stub.ExportSession(pb.ExportSessionRequest(session_id=args.id),
                                        timeout=args.timeout):
            total = chunk.total_bytes if total is None else total
            out.write(chunk.data)
            received += len(chunk.data)
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
    start, sent, read_error = time.monotonic(), [0], []

    def requests():  # on a gRPC thread: a read error ends the stream, reported below
        first = True
        while True:
            try:
                data = source.read(CHUNK)
            except OSError as error:
                return read_error.append(error)
            if not data and not first:  # an empty FILE still sends one message
                return
            sent[0] += len(data)
            yield pb.ImportSessionRequest(data=data,
                                          ttl_seconds=args.ttl_seconds if first else 0)
            first = False

    try:
        session = stub.ImportSession(requests(), timeout=args.timeout)
    finally:
        if read_error:
            raise Failed(f"attnserve: cannot read {args.file}: {read_error[0].strerror}")
    print(session.id)
    where = "stdin" if args.file == "-" else args.file
    print(f"imported {session.id} from {where}: {summary(sent[0], start)}, "
          f"position {session.position}", file=sys.stderr)


def parse_args():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=os.environ.get("ATTNSERVE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--timeout", type=float, default=300,
                        help="deadline of a turn, an export or an import, s")
    parser.add_argument("--connect_timeout", type=float, default=3)
    commands = parser.add_subparsers(dest="command", required=True)
    generate, chat_parser = commands.add_parser("generate"), commands.add_parser("chat")
    for p in (generate, chat_parser):
        p.add_argument("--max_tokens", type=int, default=0, help="0: the server's default")
        p.add_argument("--temperature", type=float, default=0.0, help="0 is greedy")
        p.add_argument("--seed", type=int, default=0)
    generate.add_argument("--prompt", required=True)
    generate.add_argument("--session", default="", help="continue this session")
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
        print(stub.ForkSession(request, timeout=10).id)


def main():
    args = parse_args()
    snapshot_file = temp = None
    try:
        if args.command == "sessions" and args.action != "fork":
            snapshot_file, temp = open_snapshot_file(args)  # a bad FILE fails at once
        with grpc.insecure_channel(args.server) as channel:
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
