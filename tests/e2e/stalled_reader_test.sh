#!/usr/bin/env bash
# A client that stops reading its stream: the real server, a Python gRPC client (Debian's
# grpcio) whose channel keeps HTTP/2 flow control at its initial 64 KiB window so the
# server's writes stall. After --stream_idle_timeout the server must end the turn,
# release the session (the next turn on it runs at once) and end the call, which the
# stalled client then sees as CANCELLED after the tokens it had not read.
# Usage: stalled_reader_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=stalled_reader_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

python_stubs "$work/stubs"

addr=127.0.0.1:$(free_port)
start_server "$addr" 127.0.0.1:$(free_port) --stream_idle_timeout=1s --max_generated_tokens=1000000

step "a stream whose client stops reading after one message is cut off after 1 s"
session=$("$client_bin" --server="$addr" sessions create) || fail "sessions create"
PYTHONPATH="$work/stubs" "$py" - "$addr" "$session" "$client_bin" <<'PY' || fail "see above"
import re, subprocess, sys, time
import grpc
from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as rpc

addr, session, client_bin = sys.argv[1:4]
channel = grpc.insecure_channel(addr, options=[("grpc.http2.bdp_probe", 0),
                                               ("grpc.http2.lookahead_bytes", 1024)])
stub = rpc.AttnServeStub(channel)
request = pb.GenerateRequest(
    session_id=session, text=b"In the beginning",
    sampling=pb.SamplingParams(temperature=0, max_tokens=100000, ignore_eos=True))
stream = stub.Generate(request, metadata=[("x-session-id", session)], timeout=60)
first = next(stream)
assert first.HasField("token"), first
start = time.monotonic()
# Reads nothing more: the window fills, the server's writes stall, and once they have
# stalled for --stream_idle_timeout the server ends the turn and releases the session.
# Waits for that (never for a fixed time), then checks it took the timeout at least.
while True:
    get = subprocess.run([client_bin, f"--server={addr}", "sessions", "get", session],
                         capture_output=True, text=True)
    if get.returncode == 0 and re.search(r"^busy: *no", get.stdout, re.M):
        break
    assert time.monotonic() - start < 60, f"the session is still held after 60 s: {get.stdout}{get.stderr}"
    time.sleep(0.1)
waited = time.monotonic() - start
assert waited >= 1, f"the session was released after {waited:.2f} s, within the 1 s timeout"
print(f"  the session was released {waited:.1f} s after the client stopped reading")

# The session was released: a turn on it from another client runs now.
turn = subprocess.run([client_bin, f"--server={addr}", "generate", f"--session={session}",
                       "--max_tokens=3", "--timeout=5", " and"], capture_output=True, text=True)
assert turn.returncode == 0, f"the session is still held: {turn.stderr}"
print(f"  the next turn ran: {turn.stderr.strip()}")

# The stalled call was ended: draining it ends in CANCELLED, never in a final message.
tokens = 0
try:
    for message in stream:
        assert not message.HasField("final"), message
        tokens += 1
    raise AssertionError("the stream ended without an error")
except grpc.RpcError as e:
    assert e.code() == grpc.StatusCode.CANCELLED, e
    print(f"  stalled call ended: {e.code().name} after {tokens} unread tokens")
PY

step "the server is healthy afterwards"
[ "$("$client_bin" --server="$addr" health)" = SERVING ] || fail "not SERVING"
echo "$test_name: PASS"
