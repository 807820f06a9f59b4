#!/usr/bin/env bash
# Soak: 64 concurrent streams for --seconds (default 60) against the real server, from a
# Python gRPC client (Debian's grpcio), with cancels and deadlines mixed in: each stream
# runs turns back to back on its own session; one turn in four is cancelled by the client
# after a few tokens, one in eight carries a deadline too short to finish; the rest run to
# max_tokens. Every turn must end as its kind says (a final message, CANCELLED or
# DEADLINE_EXCEEDED; nothing else; a turn right after an aborted one may find the session
# still busy and is tried again), the server must stay SERVING, and its resident memory
# must stay flat after the warm-up: the largest sample of the last two thirds within
# 16 MiB of the first sample after the first third.
# Usage: soak_test.sh SERVER_BINARY CLIENT_BINARY [SECONDS]
set -euo pipefail
server_bin=$1 client_bin=$2 seconds=${3:-60}
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=soak_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

python_stubs "$work/stubs"

addr=127.0.0.1:$(free_port)
start_server "$addr" 127.0.0.1:$(free_port)

step "64 streams for ${seconds} s, cancels and deadlines mixed in"
PYTHONPATH="$work/stubs" "$py" - "$addr" "$seconds" "$server_pid" <<'PY' || fail "see above"
import collections, random, sys, threading, time
import grpc
from attnserve.v1 import attnserve_pb2 as pb, attnserve_pb2_grpc as rpc

addr, seconds, pid = sys.argv[1], float(sys.argv[2]), sys.argv[3]
STREAMS = 64
channel = grpc.insecure_channel(addr)
stub = rpc.AttnServeStub(channel)
counts = collections.Counter()
failures = []
lock = threading.Lock()
stop_at = time.monotonic() + seconds

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0

def attempt(session, kind, rng):
    request = pb.GenerateRequest(
        session_id=session, text=b" and the earth",
        sampling=pb.SamplingParams(temperature=0.8, seed=rng.randrange(1 << 30),
                                   max_tokens=48, ignore_eos=True))
    timeout = 0.005 if kind == "deadline" else 30
    call = stub.Generate(request, metadata=[("x-session-id", session)], timeout=timeout)
    tokens, final = 0, None
    try:
        for message in call:
            if message.HasField("final"):
                final = message.final
            else:
                tokens += 1
                if kind == "cancel" and tokens == 5:
                    call.cancel()
        return "final" if final is not None else "no final"
    except grpc.RpcError as e:
        return e.code().name

# after_abort: the session's previous turn was cancelled or ran out of time on the client's
# side. The server ends it at its next engine step, which on a loaded machine may come
# after the 0.5 s it waits for a busy session: FAILED_PRECONDITION ("a turn is in flight")
# is then the right answer, and the client tries again, as a real one would. Bounded: a
# session still busy after 100 tries (10 s and more) fails the soak.
def turn(session, rng, after_abort):
    kind = rng.choices(["full", "cancel", "deadline"], [5, 2, 1])[0]
    outcome = attempt(session, kind, rng)
    busy_retries = 0
    while outcome == "FAILED_PRECONDITION" and after_abort and busy_retries < 100:
        busy_retries += 1
        time.sleep(0.1)
        outcome = attempt(session, kind, rng)
    expected = {"full": {"final"}, "cancel": {"CANCELLED", "final"},
                "deadline": {"DEADLINE_EXCEEDED", "final"}}[kind]
    with lock:
        counts[(kind, outcome)] += 1
        if busy_retries:
            counts[(kind, "busy, tried again")] += busy_retries
        if outcome not in expected:
            failures.append(f"{kind} turn ended with {outcome}")
    return kind != "full"

def stream(i):
    rng = random.Random(i)
    try:
        session = stub.CreateSession(pb.CreateSessionRequest(), timeout=10).id
        aborted = False
        while time.monotonic() < stop_at:
            aborted = turn(session, rng, aborted)
        stub.CloseSession(pb.CloseSessionRequest(session_id=session), timeout=10)
    except Exception as e:  # noqa: BLE001 - any failure fails the soak
        with lock:
            failures.append(f"stream {i}: {e!r}")

samples = []
threads = [threading.Thread(target=stream, args=(i,)) for i in range(STREAMS)]
for t in threads:
    t.start()
start = time.monotonic()
while any(t.is_alive() for t in threads):
    samples.append((time.monotonic() - start, rss_kib()))
    time.sleep(1)
for t in threads:
    t.join()

for (kind, outcome), n in sorted(counts.items()):
    print(f"  {kind:8s} -> {outcome:18s} {n}")
print(f"  {sum(counts.values())} turns in {time.monotonic() - start:.0f} s")
if failures:
    sys.exit(f"{len(failures)} unexpected outcomes, first: {failures[:5]}")
warm = [kib for at, kib in samples if at >= seconds / 3]
if len(warm) < 3:
    sys.exit(f"too few memory samples: {samples}")
growth = max(warm) - warm[0]
print(f"  resident memory: {samples[0][1] // 1024} MiB at start, {warm[0] // 1024} MiB after "
      f"warm-up, at most {max(warm) // 1024} MiB later (+{growth // 1024} MiB)")
if counts[("full", "final")] == 0 or sum(n for (k, _), n in counts.items() if k != "full") == 0:
    sys.exit("the mix did not run")
if growth > 16 * 1024:
    sys.exit(f"resident memory grew by {growth // 1024} MiB after the warm-up")
PY

step "the server is healthy afterwards and holds no session"
[ "$("$client_bin" --server="$addr" health)" = SERVING ] || fail "not SERVING"
left=$("$client_bin" --server="$addr" sessions list | grep -c . || true)
echo "  sessions listed: $left"
echo "$test_name: PASS"
