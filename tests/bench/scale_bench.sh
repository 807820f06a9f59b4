#!/usr/bin/env bash
# Scale-out benchmark on loopback: real HAProxy (Debian's) with deploy/haproxy/haproxy.cfg
# in front of three real attnserve_server replicas sharing one real redis-server
# (--persist=each_turn, as in docker-compose.scale.yml), all started and stopped here on
# free ports. Prints markdown tables (medians, nearest-rank p50/p99); asserts nothing.
#
#   1. Proxy overhead: `attnserve_client bench` direct to one replica vs through HAProxy
#      with that replica alone in rotation (s2, s3 in maintenance), 1 and 16 sessions,
#      the two paths interleaved, --rounds rounds each.
#   2. TTFT of the first turn after a migration (the session's previous turn ran on
#      replica A; this one goes straight to replica B with x-session-id, and B loads it
#      from Redis) vs a turn on the replica that holds it, and of the turn back on A
#      (stale copy there), over --migrate_sessions sessions, on the shipped
#      kjv-taylor2 (83 KB of state) and an untrained taylor order-2 model of 3.5 MB
#      (attnserve_init_model: dim 256, 6 layers, 8 heads x 32); then the store-side
#      pieces of a load (scale_bench_client store) on snapshots the replicas wrote.
#   3. Rolling restart of the three replicas (SIGTERM, wait for the exit, start again,
#      wait until HAProxy's gRPC health check has it UP, next one) with
#      --restart_sessions conversations through the proxy, each running turns back to
#      back: the time from the first SIGTERM to the third replica UP again, and per-turn
#      TTFT, retries and continuations before, during and after.
#
# Usage: tests/bench/scale_bench.sh BUILD_DIR [--sections=123] [--rounds=5]
#        [--migrate_sessions=50] [--restart_sessions=32] [--baseline_s=10] [--after_s=10]
# (tests/bench/run.sh scale [BUILD_DIR] builds the binaries first and runs this.)
# Needs haproxy, redis-server and python3 (Debian's). ~1-2 min on a 2-core machine.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
command_line="tests/bench/scale_bench.sh $*"
build=${1:?usage: scale_bench.sh BUILD_DIR [--flag=value ...]}
shift
sections=123 rounds=5 migrate_sessions=50 restart_sessions=32 baseline_s=10 after_s=10
for arg in "$@"; do
  case $arg in
    --sections=*) sections=${arg#*=} ;;
    --rounds=*) rounds=${arg#*=} ;;
    --migrate_sessions=*) migrate_sessions=${arg#*=} ;;
    --restart_sessions=*) restart_sessions=${arg#*=} ;;
    --baseline_s=*) baseline_s=${arg#*=} ;;
    --after_s=*) after_s=${arg#*=} ;;
    *) echo "scale_bench: unknown argument $arg (see the header of $0)" >&2; exit 2 ;;
  esac
done
py=/usr/bin/python3
haproxy_cfg=$repo/deploy/haproxy/haproxy.cfg
default_model_dir=$repo/deploy/models/kjv-taylor2
for tool in haproxy redis-server redis-cli "$py"; do
  command -v "$tool" >/dev/null || { echo "scale_bench: $tool not found" >&2; exit 1; }
done

work=$(mktemp -d /tmp/scale_bench.XXXXXX)
# Private copies: a rebuild while this runs must not swap a binary under a replica.
mkdir -p "$work/bin"
cp "$build/server/attnserve_server" "$build/client/attnserve_client" \
  "$build/server/tools/attnserve_init_model" "$build/tests/bench/scale_bench_client" "$work/bin/"
server_bin=$work/bin/attnserve_server client_bin=$work/bin/attnserve_client
sbc=$work/bin/scale_bench_client

redis_pid="" haproxy_pid="" loop_pid="" pids=()
log() { echo "scale_bench: $*" >&2; }
fail() {
  echo "scale_bench: FAIL: $*" >&2
  for f in "$work"/*.log; do
    [ -f "$f" ] || continue
    echo "--- $(basename "$f") (last 10 lines)" >&2
    tail -n 10 "$f" >&2
  done
  exit 1
}
# stop PID: SIGTERM, up to 15 s, then SIGKILL.
stop() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local pid
  [ -n "$loop_pid" ] && touch "$work/stop"
  for pid in "$loop_pid" "$haproxy_pid" "${pids[@]}" "$redis_pid"; do stop "$pid"; done
  if [ -n "${SCALE_BENCH_KEEP:-}" ]; then log "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
free_port() {
  "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
now_ms() { echo $(( ${EPOCHREALTIME/./} / 1000 )); }

# --- the stack --------------------------------------------------------------------------
big_model=$work/models/taylor2-big
"$work/bin/attnserve_init_model" --out="$big_model" --name=taylor2-3.5mb --attention=taylor \
  --order=2 --dim=256 --layers=6 --heads=8 --mlp_hidden=768 >"$work/init_model.log" 2>&1 ||
  fail "attnserve_init_model"

redis_port=$(free_port)
mkdir -p "$work/redis"
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work/redis" --save "" \
  --appendonly no --daemonize no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 1 100); do
  [ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
  sleep 0.1
done
[ "$(redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] || fail "redis-server does not answer"

server_flags=(--session_store="redis://127.0.0.1:$redis_port" --persist=each_turn
  --model_dirs="$default_model_dir,$big_model")
grpc=() metrics=()
# start_replica I: starts replica I on its addresses (log r$I.log, appended), leaves the
# pid in pids[I]; returns once health says SERVING (ms timestamp in serving_ms).
start_replica() {
  local i=$1
  "$server_bin" --listen="${grpc[i]}" --http_listen=127.0.0.1:0 --metrics_listen="${metrics[i]}" "${server_flags[@]}" \
    >>"$work/r$i.log" 2>&1 &
  pids[i]=$!
  for _ in $(seq 1 300); do
    if [ "$("$client_bin" --server="${grpc[i]}" --connect_timeout=0.2 health 2>/dev/null)" = SERVING ]; then
      serving_ms=$(now_ms)
      return 0
    fi
    kill -0 "${pids[i]}" 2>/dev/null || fail "replica r$i exited during start-up"
    sleep 0.05
  done
  fail "replica r$i is not SERVING after 15 s"
}
for i in 1 2 3; do
  grpc[i]=127.0.0.1:$(free_port) metrics[i]=127.0.0.1:$(free_port)
  start_replica "$i"
done

proxy=127.0.0.1:$(free_port)
stats=127.0.0.1:$(free_port)
socket=$work/haproxy.sock
ATTNSERVE_PROXY_BIND=$proxy HAPROXY_STATS_BIND=$stats HAPROXY_RUNTIME_API=$socket \
  ATTNSERVE_S1=${grpc[1]} ATTNSERVE_S2=${grpc[2]} ATTNSERVE_S3=${grpc[3]} \
  haproxy -f "$haproxy_cfg" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!
# runtime and server_states: HAProxy's runtime API, shared with the proxy tests.
source "$repo/tests/e2e/haproxy_lib.sh"
# wait_state NAME STATE SECONDS: until HAProxy reports server NAME (s1..s3) in STATE.
wait_state() {
  local name=$1 want=$2 limit=$3
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$deadline" ]; do
    [[ " $(server_states || true) " == *" $name=$want "* ]] && return 0
    kill -0 "$haproxy_pid" 2>/dev/null || fail "haproxy exited"
    sleep 0.05
  done
  fail "haproxy's $name is not $want after ${limit}s: $(server_states || true)"
}
for i in 1 2 3; do wait_state "s$i" UP 20; done
log "stack up: redis :$redis_port, replicas ${grpc[*]}, haproxy $proxy ($work)"

# --- header -----------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
"$client_bin" --server="${grpc[1]}" models >"$work/models.txt"
state_bytes() {  # state_bytes MODEL: "3.4 MiB (3554496 bytes)" from `attnserve_client models`
  "$client_bin" --server="${grpc[1]}" models "$1" | sed -n 's/^state\/session @1k: *//p'
}
cat <<EOF
# scale_bench

command: \`$command_line\`
date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')
machine: $cpu, $(nproc) CPUs online; load average $(cut -d' ' -f1-3 /proc/loadavg)
stack: $(haproxy -v | head -n 1 | awk '{print "HAProxy", $3}') with deploy/haproxy/haproxy.cfg, redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/'), 3 x attnserve_server (\`--session_store=redis://... --persist=each_turn\`, defaults otherwise), all on 127.0.0.1; build $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$build/CMakeCache.txt")

\`attnserve_client models\` (state per session):

\`\`\`
$(cat "$work/models.txt")
\`\`\`
EOF

# --- 1. proxy overhead ------------------------------------------------------------------
if [[ $sections == *1* ]]; then
  log "1. proxy overhead: s2 and s3 in maintenance, $rounds rounds"
  load1=$(cut -d' ' -f1-3 /proc/loadavg)
  runtime "set server attnserve/s2 state maint" >/dev/null
  runtime "set server attnserve/s3 state maint" >/dev/null
  : >"$work/part1.jsonl"
  bench_args() {  # bench_args SESSIONS
    if [ "$1" = 1 ]; then echo "--sessions=1 --turns=32 --max_tokens=32"; else
      echo "--sessions=$1 --turns=8 --max_tokens=64"; fi
  }
  for n in 1 16; do  # one unmeasured run per path first
    for path in direct proxy; do
      target=${grpc[1]}; [ "$path" = proxy ] && target=$proxy
      "$client_bin" --server="$target" bench $(bench_args "$n") --json >/dev/null
    done
  done
  for ((r = 1; r <= rounds; r++)); do
    for n in 1 16; do
      order="direct proxy"; ((r % 2 == 0)) && order="proxy direct"
      for path in $order; do
        target=${grpc[1]}; [ "$path" = proxy ] && target=$proxy
        json=$("$client_bin" --server="$target" bench $(bench_args "$n") --json) ||
          fail "bench $path $n: $json"
        echo "{\"path\":\"$path\",\"round\":$r,\"bench\":$json}" >>"$work/part1.jsonl"
      done
    done
  done
  runtime "set server attnserve/s2 state ready" >/dev/null
  runtime "set server attnserve/s3 state ready" >/dev/null
  for i in 2 3; do wait_state "s$i" UP 10; done
  "$py" - "$work/part1.jsonl" "$(bench_args 1)" "$(bench_args 16)" "$load1" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
print("\n## 1. Proxy overhead: one replica, direct vs through HAProxy\n")
print(f"load average when the section began: {sys.argv[4]}\n")
print(f"`attnserve_client bench ... --json`, 1 session: `{sys.argv[2]}`; 16 sessions: "
      f"`{sys.argv[3]}`; greedy, ignore_eos, default model kjv-taylor2. "
      f"Rounds interleaved (direct/proxy order alternating); each cell is the median over "
      f"{max(r['round'] for r in runs)} rounds of that round's figure (TTFT: client-side, "
      "nearest-rank p50/p99 of the round's turns); range in brackets.\n")
print("| sessions | path | tokens/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | errors / retries |")
print("|---|---|---|---|---|---|---|")
med = {}
for n in (1, 16):
    for path in ("direct", "proxy"):
        rs = [r["bench"] for r in runs if r["path"] == path and r["bench"]["sessions"] == n]
        def cell(vals, fmt):
            return f"{fmt.format(statistics.median(vals))} [{fmt.format(min(vals))}-{fmt.format(max(vals))}]"
        tps = [b["tokens_per_s"] for b in rs]
        p50 = [b["ttft_ms"]["p50"] for b in rs]
        p99 = [b["ttft_ms"]["p99"] for b in rs]
        itl = [b["itl_ms"]["p50"] for b in rs]
        med[(n, path)] = (statistics.median(tps), statistics.median(p50), statistics.median(p99))
        print(f"| {n} | {path} | {cell(tps, '{:.0f}')} | {cell(p50, '{:.2f}')} | "
              f"{cell(p99, '{:.2f}')} | {statistics.median(itl):.3f} | "
              f"{sum(b['errors'] for b in rs)} / {sum(b['retries'] for b in rs)} |")
print()
for n in (1, 16):
    d, p = med[(n, "direct")], med[(n, "proxy")]
    print(f"- {n} session{'s' if n > 1 else ''}: through the proxy {100 * (p[0] / d[0] - 1):+.1f}% "
          f"tokens/s, TTFT p50 {p[1] - d[1]:+.2f} ms, p99 {p[2] - d[2]:+.2f} ms (medians).")
PY
fi

# --- 2. TTFT after a migration ----------------------------------------------------------
# metric_sums ADDR: "read_sum read_count waited taken" from one replica's /metrics.
metric_sums() {
  "$py" - "$1" <<'PY'
import re, sys, urllib.request
text = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
    f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
def total(pattern):
    return sum(float(v) for v in re.findall(pattern, text, re.M))
print(total(r'^attnserve_store_latency_seconds_sum\{[^}]*op="read"[^}]*\} (\S+)$'),
      total(r'^attnserve_store_latency_seconds_count\{[^}]*op="read"[^}]*\} (\S+)$'),
      total(r'^attnserve_store_leases_total\{[^}]*outcome="waited"[^}]*\} (\S+)$'),
      total(r'^attnserve_store_leases_total\{[^}]*outcome="taken"[^}]*\} (\S+)$'))
PY
}
if [[ $sections == *2* ]]; then
  : >"$work/part2.jsonl"
  load2=$(cut -d' ' -f1-3 /proc/loadavg)
  for model in kjv-taylor2 taylor2-3.5mb; do
    log "2. migrations, $model: warm-up"
    "$sbc" migrate --a="${grpc[1]}" --b="${grpc[2]}" --model="$model" --sessions=6 >/dev/null ||
      fail "migrate warm-up on $model"
    log "2. migrations, $model: $migrate_sessions sessions"
    before="$(metric_sums "${metrics[1]}") $(metric_sums "${metrics[2]}")"
    json=$("$sbc" migrate --a="${grpc[1]}" --b="${grpc[2]}" --model="$model" \
      --sessions="$migrate_sessions" --keep=10) || fail "migrate on $model: $json"
    after="$(metric_sums "${metrics[1]}") $(metric_sums "${metrics[2]}")"
    ids=$(echo "$json" | "$py" -c 'import json,sys; print(",".join(json.load(sys.stdin)["kept"]))')
    store_json=$("$sbc" store --port="$redis_port" --ids="$ids" --reps=5) ||
      fail "store timings on $model"
    for id in ${ids//,/ }; do "$client_bin" --server="$proxy" sessions close "$id" >/dev/null; done
    echo "{\"model\":\"$model\",\"state\":\"$(state_bytes "$model")\",\"migrate\":$json,\"store\":$store_json,\"before\":\"$before\",\"after\":\"$after\"}" \
      >>"$work/part2.jsonl"
  done
  "$py" - "$work/part2.jsonl" "$migrate_sessions" "$load2" <<'PY'
import json, math, statistics, sys
def pct(v, p):
    v = sorted(v)
    return v[max(0, min(len(v), math.ceil(p * len(v) / 100 - 1e-9)) - 1)] if v else float("nan")
rows = [json.loads(l) for l in open(sys.argv[1])]
print("\n## 2. TTFT of the first turn after a migration vs on the replica holding the session\n")
print(f"load average when the section began: {sys.argv[3]}\n")
print(f"{sys.argv[2]} sessions per model, each: created on replica A, one unmeasured turn on A, "
      "then three measured turns (4 tokens, the same 31-byte prompt): **home** on A (state in "
      "A's memory), **migrate** straight to B with x-session-id (B reads the snapshot from Redis "
      "with GetWithGeneration, verifies it, takes the lease, restores the state), **back** on A "
      "(A's copy is stale: it takes the lease, sees a newer generation and adopts the stored "
      "copy). A and B alternate between r1 and r2 per session; no proxy. Client: request sent to "
      "first token on a warm channel (scale_bench_client migrate); server: "
      "Usage.time_to_first_token_ms (request arrival to first token, the load included).\n")
print("| model | state | turn | n | client TTFT p50 ms | client p99 ms | max ms | server TTFT p50 ms | server p99 ms |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    m = r["migrate"]
    for cat in ("home", "migrate", "back"):
        c, s = m[cat]["client_ms"], m[cat]["server_ms"]
        print(f"| {r['model']} | {r['state']} | {cat} | {len(c)} | {pct(c, 50):.2f} | "
              f"{pct(c, 99):.2f} | {max(c):.2f} | {pct(s, 50):.2f} | {pct(s, 99):.2f} |")
print()
for r in rows:
    m = r["migrate"]
    b = [float(x) for x in r["before"].split()]
    a = [float(x) for x in r["after"].split()]
    d = [y - x for x, y in zip(b, a)]
    reads = d[1] + d[5]
    mean_read = 1e3 * (d[0] + d[4]) / reads if reads else float("nan")
    print(f"- {r['model']}: migrate - home = {pct(m['migrate']['client_ms'], 50) - pct(m['home']['client_ms'], 50):+.2f} ms "
          f"at p50, {pct(m['migrate']['client_ms'], 99) - pct(m['home']['client_ms'], 99):+.2f} ms at p99; "
          f"the replicas' own store-read histogram: {reads:.0f} reads, mean {mean_read:.2f} ms; "
          f"leases taken after a wait: {d[2] + d[6]:.0f} of {d[2] + d[3] + d[6] + d[7]:.0f}; "
          f"client retries {m['retries']}, errors {m['errors']}.")
print("\nStore-side pieces of one load, on 10 snapshots each model's sessions left in Redis, "
      "5 passes, p50 / p99 ms (scale_bench_client store: the server's RedisSnapshotStore on its own "
      "hiredis connection, then raw hiredis; CRC-32C and a copy into a fresh buffer in process; "
      "writes to a key of their own):\n")
print("| model | snapshot bytes | read: GetWithGeneration (the server's, MULTI GET GET EXEC) | plain GET (floor) | AcquireLease | CRC-32C | copy | write: PutFenced (the server's, staged SET + Lua fence/RENAME) | plain SET (floor) | bytes through a Lua SET (PutFenced before) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    s = r["store"]
    f = lambda k: f"{pct(s[k], 50):.2f} / {pct(s[k], 99):.2f}"
    print(f"| {r['model']} | {s['bytes']:,} | {f('get_with_generation')} | {f('get')} | "
          f"{f('acquire_lease')} | {f('crc32c')} | {f('copy')} | {f('put_fenced')} | "
          f"{f('set')} | {f('set_through_lua')} |")
big = [r for r in rows if r["model"] == "taylor2-3.5mb"]
if big:
    p99 = pct(big[0]["migrate"]["migrate"]["client_ms"], 99)
    verdict = "met" if p99 < 20 else "NOT met"
    home = big[0]["migrate"]["home"]["client_ms"]
    print(f"\nAcceptance \"a turn after migration has TTFT p99 under 20 ms at 3.5 MB of state on "
          f"loopback\": client p99 {p99:.2f} ms over {len(big[0]['migrate']['migrate']['client_ms'])} "
          f"migrations: **{verdict}** on this machine (a turn without migration on the same "
          f"model: p50 {pct(home, 50):.2f} ms, p99 {pct(home, 99):.2f} ms).")
PY
fi

# --- 3. rolling restart under load ------------------------------------------------------
if [[ $sections == *3* ]]; then
  log "3. rolling restart: $restart_sessions conversations through the proxy"
  rm -f "$work/stop"
  load3=$(cut -d' ' -f1-3 /proc/loadavg)
  loop_start_ms=$(now_ms)
  "$sbc" loop --server="$proxy" --sessions="$restart_sessions" --max_tokens=32 \
    --out="$work/turns.tsv" --stop_file="$work/stop" >"$work/loop.json" 2>"$work/loop.log" &
  loop_pid=$!
  sleep $((3 + baseline_s))
  : >"$work/events.tsv"
  runtime "show stat" >"$work/stat_before.csv"
  first_term_ms=$(now_ms)
  for i in 1 2 3; do
    log_lines=$(wc -l <"$work/haproxy.log")
    term_ms=$(now_ms)
    kill -TERM "${pids[i]}"
    for _ in $(seq 1 600); do kill -0 "${pids[i]}" 2>/dev/null || break; sleep 0.05; done
    kill -0 "${pids[i]}" 2>/dev/null && fail "r$i still running 30 s after SIGTERM"
    exit_ms=$(now_ms)
    rc=0; wait "${pids[i]}" || rc=$?
    down_ms=$exit_ms
    start_replica "$i"
    wait_state "s$i" UP 30
    up_ms=$(now_ms)
    # Whether HAProxy took it out meanwhile, and on which check.
    marked=$(tail -n +"$((log_lines + 1))" "$work/haproxy.log" |
      grep -m 1 "Server attnserve/s$i is DOWN" || true)
    case $marked in
      "") marked="no (back before two failed checks)" ;;
      *"not SERVING"*) marked="yes: NOT_SERVING" ;;
      *"Connection refused"*) marked="yes: connection refused (process gone)" ;;
      *) marked="yes: $(echo "$marked" | sed 's/.*reason: \([^,]*\).*/\1/')" ;;
    esac
    printf 'r%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$i" "$term_ms" "$exit_ms" "$serving_ms" "$up_ms" \
      "$rc" "$marked" >>"$work/events.tsv"
    log "  r$i: exit $rc after $((exit_ms - term_ms)) ms, SERVING after $((serving_ms - exit_ms)) ms, UP in HAProxy after $((up_ms - serving_ms)) ms"
  done
  last_up_ms=$(now_ms)
  runtime "show stat" >"$work/stat_during.csv"
  sleep "$after_s"
  stop_ms=$(now_ms)
  touch "$work/stop"
  wait "$loop_pid" || fail "the conversations' client failed: $(tail -n 5 "$work/loop.log")"
  loop_pid=""
  "$py" - "$work/turns.tsv" "$work/events.tsv" "$loop_start_ms" "$first_term_ms" "$last_up_ms" \
    "$stop_ms" "$restart_sessions" "$work/stat_before.csv" "$work/stat_during.csv" "$load3" <<'PY'
import csv, math, sys
def pct(v, p):
    v = sorted(v)
    return v[max(0, min(len(v), math.ceil(p * len(v) / 100 - 1e-9)) - 1)] if v else float("nan")
turns = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
events = [l.split("\t") for l in open(sys.argv[2]).read().splitlines()]
start, t0, t1, stop = (int(x) for x in sys.argv[3:7])
n = sys.argv[7]
print(f"\n## 3. Rolling restart of three replicas, {n} live conversations through HAProxy\n")
print(f"load average when the section began: {sys.argv[10]}\n")
print(f"{n} conversations (scale_bench_client loop, one thread and one session each, "
      "created through the proxy), each running turns of 32 tokens back to back (greedy, "
      "ignore_eos) through HAProxy on one channel; retries and continuations are the sample "
      "client's (client/retry.h, RunTurn). Rolling restart: for r1, r2, r3 in turn, SIGTERM, "
      "wait for the process to exit, start it again on the same ports, wait until HAProxy's "
      "gRPC health check has it UP, then the next.\n")
print("| replica | SIGTERM -> exit ms | exit -> SERVING ms | SERVING -> UP in HAProxy ms | SIGTERM -> UP ms | exit status | HAProxy marked it DOWN |")
print("|---|---|---|---|---|---|---|")
for name, term, ex, serving, up, rc, marked in events:
    term, ex, serving, up = int(term), int(ex), int(serving), int(up)
    print(f"| {name} | {ex - term} | {serving - ex} | {up - serving} | {up - term} | {rc} | {marked} |")
def backend(path):
    rows = list(csv.DictReader(l.lstrip("# ") for l in open(path) if l.strip()))
    return next(r for r in rows if r["pxname"] == "attnserve" and r["svname"] == "BACKEND")
b0, b1 = backend(sys.argv[8]), backend(sys.argv[9])
delta = lambda k: int(b1.get(k) or 0) - int(b0.get(k) or 0)
print(f"\nHAProxy backend during the restart: {delta('wretr')} connection retries, "
      f"{delta('wredis')} redispatches, {delta('econ')} connection errors, "
      f"{delta('eresp')} response errors, {delta('hrsp_5xx')} HTTP 5xx.")
print(f"\n**First SIGTERM to the third replica UP again: {(t1 - t0) / 1000:.2f} s.**\n")
windows = [("before (from 3 s after start)", start + 3000, t0), ("during the restart", t0, t1 + 1),
           ("after (third replica UP)", t1 + 1, stop)]
print("| window | s | turns | tokens/s | TTFT p50 ms | TTFT p99 ms | TTFT max ms | turn p99 ms | retries | continuations | turns failed |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for name, a, b in windows:
    w = [t for t in turns if a <= int(t["start_epoch_ms"]) < b]
    ok = [t for t in w if t["error"] == "-"]
    ttft = [float(t["ttft_ms"]) for t in ok if float(t["ttft_ms"]) >= 0]
    total = [float(t["total_ms"]) for t in ok]
    secs = (b - a) / 1000
    toks = sum(int(t["tokens"]) for t in w)
    print(f"| {name} | {secs:.1f} | {len(w)} | {toks / secs:.0f} | {pct(ttft, 50):.2f} | "
          f"{pct(ttft, 99):.2f} | {max(ttft) if ttft else float('nan'):.1f} | {pct(total, 99):.1f} | "
          f"{sum(int(t['retries']) for t in w)} | {sum(int(t['continuations']) for t in w)} | "
          f"{len(w) - len(ok)} |")
failed = [t["error"] for t in turns if t["error"] != "-"]
if failed:
    print(f"\nFailed turns: {len(failed)}; first: `{failed[0]}`")
PY
  echo
  echo "Session creations/closes retried: $(cat "$work/loop.json")"
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
