"""Hostile requests against a running attnserve_server, through a real gRPC channel.

Every malformed, oversized, out-of-range, unauthenticated and cross-tenant request in
the table below must be answered with its precise status code and a message that says
what was wrong, is short (no unbounded echo of the input) and never repeats an API key;
requests in between must keep working (hostile_test.sh checks health at the end).
Driven by hostile_test.sh, which starts the server (plaintext, then TLS) with two
tenants: alice (max_sessions=4) and bob.

Usage: hostile_requests.py ADDR ALICE_KEY BOB_KEY [--tls_ca=PEM]
"""
import sys

import grpc
from attnserve.v1 import attnserve_pb2 as pb
from attnserve.v1 import attnserve_pb2_grpc as rpc

MAX_MESSAGE_BYTES = 512  # longest error message accepted: nothing echoes input unbounded
C = grpc.StatusCode


def main():
    addr, alice_key, bob_key = sys.argv[1:4]
    ca = next((a.split("=", 1)[1] for a in sys.argv[4:] if a.startswith("--tls_ca=")), None)
    if ca:
        creds = grpc.ssl_channel_credentials(root_certificates=open(ca, "rb").read())
        channel = grpc.secure_channel(addr, creds)
    else:
        channel = grpc.insecure_channel(addr)
    stub = rpc.AttnServeStub(channel)
    keys = {"alice": alice_key, "bob": bob_key}
    failures = []
    checked = 0

    def md(who, session=None, extra=()):
        out = []
        if who in keys:
            out.append(("authorization", f"Bearer {keys[who]}"))
        elif who is not None:
            out.append(("authorization", who))  # a raw header value
        if session is not None:
            out.append(("x-session-id", session))
        return out + list(extra)

    def generate(request, who="alice", session=None, extra=()):
        """Runs one Generate to the end; returns (code, message, final)."""
        sid = request.session_id if session is None else session
        call = stub.Generate(request, metadata=md(who, sid or None, extra), timeout=30)
        final = None
        try:
            for m in call:
                if m.HasField("final"):
                    final = m.final
            return C.OK, "", final
        except grpc.RpcError as e:
            return e.code(), e.details() or "", final

    def unary(method, request, who="alice"):
        try:
            return C.OK, "", method(request, metadata=md(who), timeout=30)
        except grpc.RpcError as e:
            return e.code(), e.details() or "", None

    def export(session_id, who="alice"):
        try:
            data = b"".join(c.data for c in stub.ExportSession(
                pb.ExportSessionRequest(session_id=session_id), metadata=md(who), timeout=30))
            return C.OK, "", data
        except grpc.RpcError as e:
            return e.code(), e.details() or "", None

    def import_(blobs, who="alice"):
        # Each blob in chunks of at most 1 MiB, as the API asks (a snapshot of the default
        # model is 1.8 MB: one message would pass the server's request size limit).
        mib = 1 << 20
        chunks = [b[i:i + mib] for b in blobs for i in range(0, max(len(b), 1), mib)]
        try:
            s = stub.ImportSession(iter([pb.ImportSessionRequest(data=c) for c in chunks]),
                                   metadata=md(who), timeout=30)
            return C.OK, "", s
        except grpc.RpcError as e:
            return e.code(), e.details() or "", None

    def expect(name, got, code, says=None):
        nonlocal checked
        checked += 1
        got_code, message = got[0], got[1]
        problems = []
        if got_code != code:
            problems.append(f"code {got_code.name}, expected {code.name}")
        if code != C.OK and not message:
            problems.append("no message")
        if says and says not in message:
            problems.append(f"message lacks {says!r}")
        if len(message.encode()) > MAX_MESSAGE_BYTES:
            problems.append(f"message of {len(message.encode())} bytes")
        for key in keys.values():
            if key in message:
                problems.append("message repeats an API key")
        status = "ok " if not problems else "BAD"
        print(f"  {status} {name}: {got_code.name} {message[:100]!r}")
        if problems:
            failures.append(f"{name}: {'; '.join(problems)} (message {message[:200]!r})")
        return got

    def greedy(text=b"In the beginning", session="", max_tokens=4, **sampling):
        s = pb.SamplingParams(temperature=0, max_tokens=max_tokens)
        for k, v in sampling.items():
            if k == "stop":
                s.stop.extend(v)
            else:
                setattr(s, k, v)
        return pb.GenerateRequest(session_id=session, text=text, sampling=s)

    # --- authentication -------------------------------------------------------------
    print("authentication")
    expect("no authorization header", generate(greedy(), who=None), C.UNAUTHENTICATED)
    expect("unknown key", generate(greedy(), who="Bearer " + "x" * 40), C.UNAUTHENTICATED)
    expect("another scheme", generate(greedy(), who="Basic " + alice_key), C.UNAUTHENTICATED)
    expect("a key that is almost alice's", generate(greedy(), who="Bearer " + alice_key[:-1]),
           C.UNAUTHENTICATED)
    expect("unauthenticated ListSessions",
           unary(stub.ListSessions, pb.ListSessionsRequest(), who=None), C.UNAUTHENTICATED)
    expect("valid key", generate(greedy()), C.OK)

    # --- sampling and limits --------------------------------------------------------
    print("sampling and limits")
    expect("temperature NaN", generate(greedy(temperature=float("nan"))), C.INVALID_ARGUMENT,
           "temperature")
    expect("temperature inf", generate(greedy(temperature=float("inf"))), C.INVALID_ARGUMENT,
           "temperature")
    expect("temperature -1", generate(greedy(temperature=-1.0)), C.INVALID_ARGUMENT,
           "temperature")
    expect("top_p 1.5", generate(greedy(top_p=1.5)), C.INVALID_ARGUMENT, "top_p")
    expect("top_k -1", generate(greedy(top_k=-1)), C.INVALID_ARGUMENT, "top_k")
    expect("max_tokens -5", generate(greedy(max_tokens=-5)), C.INVALID_ARGUMENT, "max_tokens")
    expect("max_tokens 10^9", generate(greedy(max_tokens=10**9)), C.INVALID_ARGUMENT,
           "max_tokens")
    expect("10,000 stop strings", generate(greedy(stop=["x"] * 10000)), C.INVALID_ARGUMENT,
           "stop")
    expect("a 100 KB stop string", generate(greedy(stop=["y" * 100000])), C.INVALID_ARGUMENT,
           "stop")
    expect("hex stop string that is not hex",
           generate(greedy(stop=["zz"], stop_encoding=pb.STOP_ENCODING_HEX)),
           C.INVALID_ARGUMENT, "stop")
    bad_ids = pb.GenerateRequest(tokens=pb.TokenIds(ids=[65, 1 << 30]),
                                 sampling=pb.SamplingParams(max_tokens=2))
    expect("token id outside the vocabulary", generate(bad_ids), C.INVALID_ARGUMENT, "token")
    negative = pb.GenerateRequest(tokens=pb.TokenIds(ids=[-7]),
                                  sampling=pb.SamplingParams(max_tokens=2))
    expect("negative token id", generate(negative), C.INVALID_ARGUMENT, "token")
    expect("prompt over --max_prompt_tokens (600 bytes, limit 512)",
           generate(greedy(text=b"p" * 600)), C.INVALID_ARGUMENT, "prompt")
    expect("request over the message limit (8 MB prompt)",
           generate(greedy(text=b"q" * (8 << 20))), C.RESOURCE_EXHAUSTED)
    expect("unknown model with a 5 KB name",
           generate(pb.GenerateRequest(model="m" * 5000, text=b"hi",
                                       sampling=pb.SamplingParams(max_tokens=2))),
           C.NOT_FOUND)
    expect("unknown session", generate(greedy(session="0" * 32)), C.NOT_FOUND)
    expect("a 5 KB session id", generate(greedy(session="s" * 5000)), C.NOT_FOUND)

    # --- sessions -------------------------------------------------------------------
    print("sessions")
    code, _, alice_session = expect(
        "alice creates a session", unary(stub.CreateSession, pb.CreateSessionRequest()), C.OK)
    sid = alice_session.id if alice_session else ""
    expect("alice's turn", generate(greedy(session=sid)), C.OK)
    expect("x-session-id disagreeing with the message",
           generate(greedy(session=sid), session="f" * 32), C.INVALID_ARGUMENT, "x-session-id")
    expect("empty prompt on a session with nothing pending",
           generate(greedy(text=b"", session=unary(
               stub.CreateSession, pb.CreateSessionRequest())[2].id)),
           C.INVALID_ARGUMENT, "prompt")
    expect("ttl_seconds -1", unary(stub.CreateSession, pb.CreateSessionRequest(ttl_seconds=-1)),
           C.INVALID_ARGUMENT, "ttl")
    expect("ttl_seconds over --max_ttl",
           unary(stub.CreateSession, pb.CreateSessionRequest(ttl_seconds=10**9)),
           C.INVALID_ARGUMENT, "ttl")
    expect("unknown attention module",
           unary(stub.CreateSession, pb.CreateSessionRequest(attention_module="bogus")),
           C.INVALID_ARGUMENT, "attention")
    # alice has 2 sessions; her limit is 4.
    unary(stub.CreateSession, pb.CreateSessionRequest())
    unary(stub.CreateSession, pb.CreateSessionRequest())
    expect("alice's fifth session (max_sessions=4)",
           unary(stub.CreateSession, pb.CreateSessionRequest()), C.RESOURCE_EXHAUSTED,
           "max_sessions")
    expect("bob is not limited by alice's quota",
           unary(stub.CreateSession, pb.CreateSessionRequest(), who="bob"), C.OK)

    # --- another tenant's session ---------------------------------------------------
    print("another tenant's session")
    never = "0123456789abcdef0123456789abcdef"
    _, missing, _ = unary(stub.GetSession, pb.GetSessionRequest(session_id=never), who="bob")
    got = expect("bob's GetSession on alice's",
                 unary(stub.GetSession, pb.GetSessionRequest(session_id=sid), who="bob"),
                 C.NOT_FOUND)
    if got[1].replace(sid, never) != missing:
        failures.append(f"NOT_FOUND for another tenant's session differs from an unknown "
                        f"id's: {got[1]!r} vs {missing!r}")
    expect("bob's turn on alice's", generate(greedy(session=sid), who="bob"), C.NOT_FOUND)
    expect("bob's ExportSession of alice's", export(sid, who="bob"), C.NOT_FOUND)
    expect("bob's ForkSession of alice's",
           unary(stub.ForkSession, pb.ForkSessionRequest(session_id=sid), who="bob"),
           C.NOT_FOUND)
    expect("bob's CloseSession of alice's",
           unary(stub.CloseSession, pb.CloseSessionRequest(session_id=sid), who="bob"),
           C.NOT_FOUND)
    _, _, listed = expect("bob's ListSessions",
                          unary(stub.ListSessions, pb.ListSessionsRequest(), who="bob"), C.OK)
    if listed is not None and any(s.id == sid for s in listed.sessions):
        failures.append("bob's ListSessions shows alice's session")
    expect("alice's session still runs", generate(greedy(session=sid)), C.OK)

    # --- imports --------------------------------------------------------------------
    print("imports")
    _, _, snapshot = expect("alice exports her session", export(sid), C.OK)
    expect("import of garbage", import_([b"not a snapshot" * 10]), C.INVALID_ARGUMENT)
    expect("import of nothing", import_([]), C.INVALID_ARGUMENT)
    if snapshot:
        # Damaged bytes are DATA_LOSS (proto/attnserve/v1/SNAPSHOT.md), not bad input.
        expect("import of a truncated snapshot", import_([snapshot[: len(snapshot) // 2]]),
               C.DATA_LOSS, "truncated")
        flipped = bytearray(snapshot)
        flipped[len(flipped) // 2] ^= 0x40
        expect("import of a snapshot with a flipped bit", import_([bytes(flipped)]),
               C.DATA_LOSS, "checksum")
        code, _, imported = expect("bob imports alice's exported bytes", import_([snapshot],
                                                                                  who="bob"),
                                   C.OK)
        if imported is not None:
            expect("the import is bob's", generate(greedy(session=imported.id), who="bob"), C.OK)
            expect("and not alice's", generate(greedy(session=imported.id)), C.NOT_FOUND)

    print(f"{checked} requests checked")
    if failures:
        print("FAILURES:\n  " + "\n  ".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
