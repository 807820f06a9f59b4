#!/usr/bin/env bash
# Scale-out on loopback: real HAProxy (Debian's) with deploy/haproxy/haproxy.cfg in front
# of three real attnserve_server replicas that share one real redis-server
# (--persist=each_turn). Through the proxy: health; sessions created and continued for
# several turns, every turn of a session on ONE replica (each replica's own /metrics
# counts the Generate calls it served); a 20-turn chat and a 2048-token stream not cut;
# the runtime API drains a replica (the session's next turn goes to another replica and
# continues where it was from Redis) and makes it ready again (the session is routed back
# to the replica that still holds its older copy in memory: GetSession and the next turn
# must see the newest state); a replica that drains on SIGTERM is taken out by the gRPC
# health check (NOT_SERVING) while its open stream (held open by its reader,
# held_turn.py, until the drain has stopped it) runs to its final message. If nginx is
# installed, the same session checks through deploy/nginx/attnserve.conf.
# Usage: proxy_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
haproxy_cfg=$repo/deploy/haproxy/haproxy.cfg
nginx_conf=$repo/deploy/nginx/attnserve.conf
test_name=proxy_test logs="haproxy r1 r2 r3"
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
redis_pid="" haproxy_pid="" nginx_pid="" pids=()
cleanup() {
  local pid
  for pid in "$nginx_pid" "$haproxy_pid" "${pids[@]}" "$redis_pid"; do stop "$pid"; done
  rm -rf "$work"
}
trap cleanup EXIT

command -v haproxy >/dev/null ||
  fail "haproxy not found: deploy/install.sh installs Debian's 'haproxy' (2.6)"
command -v redis-server >/dev/null ||
  fail "redis-server not found: deploy/install.sh installs Debian's 'redis-server'"
start=$SECONDS

# --- the stack --------------------------------------------------------------------------
redis_port=$(free_port)
start_redis "$redis_port"
grpc=() metrics=()
# A grace long enough for the checks made while a replica drains, short so the test stays
# short; a held stream (below) lasts it whatever the engine's speed.
server_flags=(--session_store="redis://127.0.0.1:$redis_port" --persist=each_turn
  --max_generated_tokens=200000 --shutdown_grace=4s)
for i in 1 2 3; do
  grpc[i]=127.0.0.1:$(free_port) metrics[i]=127.0.0.1:$(free_port)
  start_named "r$i" "${grpc[i]}" "${metrics[i]}" "${server_flags[@]}"
  pids[i]=$started_pid
done

proxy=127.0.0.1:$(free_port)
stats=127.0.0.1:$(free_port)
socket=$work/haproxy.sock
step "starting haproxy $(haproxy -v | head -n 1 | awk '{print $3}') on $proxy with $haproxy_cfg"
haproxy -c -f "$haproxy_cfg" >"$work/haproxy-check.log" 2>&1 ||
  logs=haproxy-check fail "haproxy -c rejects $haproxy_cfg"
ATTNSERVE_PROXY_BIND=$proxy HAPROXY_STATS_BIND=$stats HAPROXY_RUNTIME_API=$socket \
  ATTNSERVE_S1=${grpc[1]} ATTNSERVE_S2=${grpc[2]} ATTNSERVE_S3=${grpc[3]} \
  haproxy -f "$haproxy_cfg" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!

source "$(dirname "$0")/haproxy_lib.sh"
step "waiting for HAProxy's gRPC health checks to pass on all three replicas"
wait_states "s1=UP s2=UP s3=UP" 15

# generate_counts: Generate calls served by each replica (any status), from its /metrics.
generate_counts() {
  "$py" - "${metrics[1]}" "${metrics[2]}" "${metrics[3]}" <<'PY'
import re, sys, urllib.request
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
counts = []
for address in sys.argv[1:]:
    text = direct.open(f"http://{address}/metrics", timeout=5).read().decode()
    counts.append(sum(float(m.group(1)) for m in re.finditer(
        r'^attnserve_requests_total\{[^}]*method="Generate"[^}]*\} (\S+)$', text, re.M)))
print(" ".join(str(int(c)) for c in counts))
PY
}
# replica_of BEFORE AFTER EXPECTED: the one replica (1-3) whose count grew, by EXPECTED
# calls, while the others did not; fails otherwise.
replica_of() {
  local -a b=($1) a=($2)
  local i home="" spread=""
  for i in 0 1 2; do
    local delta=$((a[i] - b[i]))
    spread+="r$((i + 1))+$delta "
    if [ "$delta" -ne 0 ]; then
      [ -z "$home" ] && [ "$delta" -eq "$3" ] || fail "$what: turns spread over replicas: $spread"
      home=$((i + 1))
    fi
  done
  [ -n "$home" ] || fail "$what: no replica counted the $3 turns ($spread)"
  echo "$home"
}
px() { "$client_bin" --server="$proxy" "$@"; }
# finish_of FILE FIELD: a field of the last [finish=...] line in FILE.
finish_of() { sed -n "s/.*\[.*\b$2=\([^] ]*\).*/\1/p" "$1" | tail -n 1; }

# --- through HAProxy --------------------------------------------------------------------
step "health through the proxy"
[ "$(px health)" = SERVING ] || fail "health through the proxy is not SERVING"
px models >/dev/null || fail "models through the proxy"

# sticky_session VIA NAME TURNS: creates a session through VIA, runs TURNS turns on it
# through VIA; every turn must land on one replica and the position must grow. Leaves
# the session id in sid, its position in sid_position and the replica in home.
sticky_session() {
  local via=$1 name=$2 turns=$3 before after t position last=0
  sid=$("$client_bin" --server="$via" sessions create 2>"$work/$name.create.err") ||
    fail "sessions create through $via: $(cat "$work/$name.create.err")"
  before=$(generate_counts)
  for ((t = 1; t <= turns; t++)); do
    "$client_bin" --server="$via" generate --session="$sid" --max_tokens=12 \
      "Turn $t of $name." >"$work/$name.$t.out" 2>"$work/$name.$t.err" ||
      fail "$name: turn $t on session $sid through $via failed: $(cat "$work/$name.$t.err")"
    position=$(finish_of "$work/$name.$t.err" position)
    [ -n "$position" ] && [ "$position" -gt "$last" ] ||
      fail "$name: turn $t ended at position '$position' after $last: $(cat "$work/$name.$t.err")"
    last=$position
  done
  after=$(generate_counts)
  what=$name home=$(replica_of "$before" "$after" "$turns")
  position=$("$client_bin" --server="$via" sessions get "$sid" |
    sed -n 's/^position: *\([0-9]*\) tokens$/\1/p')
  [ "$position" = "$last" ] ||
    fail "$name: sessions get through $via reports position '$position', not $last"
  sid_position=$last
  step "  $name: session $sid, $turns turns, all on replica r$home (position $last)"
}
step "sessions through the proxy: every turn of a session lands on one replica"
homes=()
for n in 1 2 3 4; do
  sticky_session "$proxy" "session$n" 4
  homes+=("$home")
done
step "  replicas serving the four sessions: ${homes[*]} (hash of x-session-id)"

step "a 20-turn chat through the proxy, one replica"
before=$(generate_counts)
for t in $(seq 1 20); do echo "Line $t of the chat."; done |
  px chat --max_tokens=16 --stats >"$work/chat.out" 2>"$work/chat.err" ||
  fail "chat through the proxy failed: $(tail -n 5 "$work/chat.err")"
[ "$(grep -c 'finish=' "$work/chat.err")" -eq 20 ] ||
  fail "chat: expected 20 finish lines: $(cat "$work/chat.err")"
what=chat chat_home=$(replica_of "$before" "$(generate_counts)" 20)
step "  20 turns, all on replica r$chat_home"

step "a 2048-token stream through the proxy is not cut"
px generate --max_tokens=2048 --ignore_eos --temperature=0.8 --seed=5 "In the beginning" \
  >"$work/long.out" 2>"$work/long.err" || fail "long stream failed: $(cat "$work/long.err")"
[ "$(finish_of "$work/long.err" finish)" = length ] &&
  [ "$(finish_of "$work/long.err" generated_tokens)" = 2048 ] ||
  fail "long stream: $(cat "$work/long.err")"
[ "$(wc -c <"$work/long.out")" -ge 2048 ] || fail "long stream: only $(wc -c <"$work/long.out") bytes"

step "runtime API: 'set server attnserve/s$home state drain' moves the last session's turns"
drained=$home
runtime "set server attnserve/s$drained state drain" >"$work/runtime.out"
! grep -q "[^[:space:]]" "$work/runtime.out" || fail "runtime API answered: $(cat "$work/runtime.out")"
before=$(generate_counts)
px generate --session="$sid" --max_tokens=12 "After the drain." \
  >"$work/moved.out" 2>"$work/moved.err" || fail "turn after the drain: $(cat "$work/moved.err")"
what="turn after the drain" moved_to=$(replica_of "$before" "$(generate_counts)" 1)
[ "$moved_to" != "$drained" ] || fail "the turn went to the drained replica r$drained"
# continued POSITION TURN: turn TURN continued the session from POSITION.
continued() {
  [ "$(finish_of "$work/$2.err" position)" -eq "$(($1 + $(finish_of "$work/$2.err" prompt_tokens) +
    $(finish_of "$work/$2.err" generated_tokens)))" ]
}
continued "$sid_position" moved ||
  fail "on r$moved_to the session did not continue from position $sid_position: $(cat "$work/moved.err")"
step "  the turn ran on r$moved_to, continuing from position $sid_position (loaded from Redis)"
moved_position=$(finish_of "$work/moved.err" position)
step "runtime API: 'set server attnserve/s$drained state ready': the session goes back to r$drained"
# r$drained still holds the session in memory as it was before the moved turn; its next
# turn there must continue from the moved turn's position (the store is the truth).
runtime "set server attnserve/s$drained state ready" >/dev/null
wait_states "s1=UP s2=UP s3=UP" 5
got=$(px sessions get "$sid" | sed -n 's/^position: *\([0-9]*\) tokens$/\1/p')
[ "$got" = "$moved_position" ] ||
  fail "GetSession on r$drained reports position '$got', not $moved_position: a stale copy from memory"
before=$(generate_counts)
px generate --session="$sid" --max_tokens=12 "Back home." \
  >"$work/back.out" 2>"$work/back.err" || fail "turn after ready: $(cat "$work/back.err")"
what="turn after ready" back_to=$(replica_of "$before" "$(generate_counts)" 1)
[ "$back_to" = "$drained" ] || fail "the turn after 'ready' ran on r$back_to, not r$drained"
continued "$moved_position" back ||
  fail "back on r$drained the session did not continue from position $moved_position: $(cat "$work/back.err")"
step "  the turn ran on r$drained and continued from position $moved_position"
px sessions close "$sid" >/dev/null || fail "closing the session"

# --- through nginx ----------------------------------------------------------------------
if command -v nginx >/dev/null; then
  nginx_addr=127.0.0.1:$(free_port)
  step "nginx $(nginx -v 2>&1 | sed 's/.*nginx\///') on $nginx_addr with $nginx_conf"
  mkdir -p "$work/nginx/tmp"
  sed -e "s/attnserve-1:50051/${grpc[1]}/; s/attnserve-2:50051/${grpc[2]}/" \
    -e "s/attnserve-3:50051/${grpc[3]}/; s/listen 50051 http2/listen $nginx_addr http2/" \
    "$nginx_conf" >"$work/nginx/attnserve.conf"
  grep -q "${grpc[3]}" "$work/nginx/attnserve.conf" && grep -q "listen $nginx_addr" \
    "$work/nginx/attnserve.conf" || fail "could not point $nginx_conf at the loopback replicas"
  cat >"$work/nginx/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $work/nginx/nginx.pid;
error_log $work/nginx.log info;
events { worker_connections 256; }
http {
    access_log off;
    client_body_temp_path $work/nginx/tmp/body;
    proxy_temp_path $work/nginx/tmp/proxy;
    fastcgi_temp_path $work/nginx/tmp/fastcgi;
    uwsgi_temp_path $work/nginx/tmp/uwsgi;
    scgi_temp_path $work/nginx/tmp/scgi;
    include $work/nginx/attnserve.conf;
}
EOF
  nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" -t >"$work/nginx-check.log" 2>&1 ||
    logs=nginx-check fail "nginx -t rejects $nginx_conf"
  nginx -p "$work/nginx" -c "$work/nginx/nginx.conf" >>"$work/nginx.log" 2>&1 &
  nginx_pid=$!
  for _ in $(seq 1 50); do
    "$client_bin" --server="$nginx_addr" --connect_timeout=0.1 health >/dev/null 2>&1 && break
    kill -0 "$nginx_pid" 2>/dev/null || logs=nginx fail "nginx exited"
    sleep 0.1
  done
  [ "$("$client_bin" --server="$nginx_addr" health)" = SERVING ] ||
    logs=nginx fail "health through nginx is not SERVING"
  step "sessions through nginx: every turn of a session lands on one replica"
  for n in 1 2 3; do logs="nginx r1 r2 r3" sticky_session "$nginx_addr" "nginx$n" 3; done
  "$client_bin" --server="$nginx_addr" generate --max_tokens=2048 --ignore_eos "And" \
    >"$work/nlong.out" 2>"$work/nlong.err" || fail "long stream through nginx: $(cat "$work/nlong.err")"
  [ "$(finish_of "$work/nlong.err" generated_tokens)" = 2048 ] ||
    fail "long stream through nginx: $(cat "$work/nlong.err")"
  stop "$nginx_pid"
  nginx_pid=""
else
  step "SKIP nginx: not installed (Debian package 'nginx'; deploy/install.sh)"
fi

# --- a replica that drains leaves the proxy's rotation ----------------------------------
step "SIGTERM on a replica with a held stream through the proxy: health check takes it out"
# A one-turn generate (round robin) whose reader holds it open: more tokens than the
# reader's window and HAProxy's buffers hold (up to ~10,000), so it pauses in flight.
max_tokens=40000 held_turn "$proxy" drain "In the beginning" --ignore_eos
stream_pid=$held_pid
victim=""
deadline=$((SECONDS + 60))
while [ -z "$victim" ]; do  # the replica where it pauses
  for i in 1 2 3; do
    [ "$(metric_of "${metrics[i]}" attnserve_waiting_turns)" -ge 1 ] && victim=$i
  done
  [ -n "$victim" ] || [ "$SECONDS" -lt "$deadline" ] ||
    fail "no replica reports the held stream as a paused turn after 60 s: $(cat "$work/drain.err")"
  [ -n "$victim" ] || sleep 0.05
done
drains=$(drain_reports "r$victim")
kill -TERM "${pids[victim]}"
want=""
for i in 1 2 3; do want+="${want:+ }s$i=$([ "$i" = "$victim" ] && echo DOWN || echo UP)"; done
wait_states "$want" 8
grep -q "attnserve/s$victim .*health is not SERVING" "$work/haproxy.log" ||
  fail "haproxy did not report r$victim's health as not SERVING"
step "  r$victim marked DOWN by its health check (NOT_SERVING) while its stream is held open"
[ "$(px health)" = SERVING ] || fail "health through the proxy with r$victim draining"
px generate --max_tokens=8 "While one drains." >/dev/null 2>"$work/during.err" ||
  fail "a request through the proxy while r$victim drains: $(cat "$work/during.err")"
[ "$(drain_reports "r$victim")" = "$drains" ] ||
  fail "r$victim's grace ran out before the checks above were done: raise --shutdown_grace"
wait_drain_report "r$victim" "$drains"
release drain
rc=0
wait "$stream_pid" || rc=$?
[ "$(finish_of "$work/drain.err" finish)" = shutdown ] && [ "$(held_field drain end)" = shutdown ] ||
  fail "the stream on the draining replica ended without its final message (exit $rc): $(cat "$work/drain.err")"
step "  the stream ran to its final message: $(grep -o '\[finish=.*\]' "$work/drain.err")"
wait_exit "${pids[victim]}" 10
[ "$exit_status" -eq 0 ] || fail "r$victim exited with $exit_status after SIGTERM"
pids[victim]=""

step "all checks passed in $((SECONDS - start)) s"
