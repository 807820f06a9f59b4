#!/usr/bin/env python3
"""Sample Python client for attnserve (attnserve.v1.AttnServe): streaming generation, a
multi-turn session and error handling, with stubs generated from proto/ (README.md here).
  generate --prompt=TEXT  stream the reply's bytes to stdout as they arrive, then a finish
                          line to stderr, as `attnserve_client generate` does
  chat TURN [TURN...]     on one new session (closed at the end), each TURN + "\\n" is a
                          turn and each reply ends with a newline, as `attnserve_client chat`
Exit status: 0 ok; 1 an error status ("attnserve: CODE: message") or a turn ended in error
or cancelled; 2 bad command line; 3 no connection within --connect_timeout.
"""
import argparse
import os
import sys

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as pb_grpc


class TurnFailed(Exception):  # no error status, but the turn did not end by stop or length
    pass


def run_turn(stub, args, text, session_id="", end_line=False):
    """Streams one Generate turn's bytes to stdout (then a newline if end_line and they do
    not end with one) and its finish line to stderr. Raises grpc.RpcError or TurnFailed."""
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
        raise TurnFailed("attnserve: the stream ended without a final message")
    u, reason = final.usage, pb.FinishReason.Name(final.reason)
    sys.stderr.write(f"[finish={reason.removeprefix('FINISH_REASON_').lower()} "
                     f"prompt_tokens={u.prompt_tokens} generated_tokens={u.generated_tokens} "
                     f"position={u.session_position} ttft_ms={u.time_to_first_token_ms:.1f}]\n")
    if final.reason not in (pb.FINISH_REASON_STOP, pb.FINISH_REASON_LENGTH):
        raise TurnFailed(f"attnserve: generation ended: {reason} {final.error}".rstrip())


def chat(stub, args):
    session = stub.CreateSession(pb.CreateSessionRequest(), timeout=10)
    print(f"[session {session.id}]", file=sys.stderr)
    try:  # each turn sends only its new text; the session holds the conversation
        for turn in args.turns:
            run_turn(stub, args, turn.encode() + b"\n", session.id, end_line=True)
    finally:
        stub.CloseSession(pb.CloseSessionRequest(session_id=session.id), timeout=10)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default=os.environ.get("ATTNSERVE_SERVER", "127.0.0.1:50051"))
    parser.add_argument("--timeout", type=float, default=300, help="deadline of a turn, s")
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
    args = parser.parse_args()
    with grpc.insecure_channel(args.server) as channel:
        try:
            grpc.channel_ready_future(channel).result(timeout=args.connect_timeout)
        except grpc.FutureTimeoutError:
            print(f"attnserve: no connection to {args.server} within "
                  f"{args.connect_timeout:g} s", file=sys.stderr)
            return 3
        stub = pb_grpc.AttnServeStub(channel)
        try:
            if args.command == "generate":
                run_turn(stub, args, args.prompt.encode(), args.session)
            else:
                chat(stub, args)
            return 0
        except grpc.RpcError as error:  # e.g. INVALID_ARGUMENT, naming the field
            print(f"attnserve: {error.code().name}: {error.details()}", file=sys.stderr)
        except TurnFailed as error:
            print(error, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
