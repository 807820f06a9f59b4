# Shared by the end-to-end scripts (sourced, not run). The script sets test_name, work (a
# temp dir), server_bin and client_bin first, and may set logs: the names of the
# $work/<name>.log files to show when a check fails (default: server).
py=${py:-/usr/bin/python3}  # Debian's: python3-grpcio and python3-protobuf are there
server_pid=""

step() { echo "$test_name: $*"; }

fail() {
  echo "$test_name: FAIL: $*" >&2
  for log in ${logs:-server}; do
    echo "--- $log log (last 20 lines)" >&2
    tail -n 20 "$work/$log.log" >&2 || true
  done
  exit 1
}

# free_port: a loopback port free now, and never one this script was given before (the
# kernel may hand the same free port to two calls; $work/.ports remembers them).
free_port() {
  local port
  while :; do
    port=$("$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    if [ -n "${work:-}" ] && [ -d "$work" ]; then
      grep -qx "$port" "$work/.ports" 2>/dev/null && continue
      echo "$port" >>"$work/.ports"
    fi
    echo "$port"
    return 0
  done
}

# stop PID: SIGTERM, up to 5 s, then SIGKILL.
stop() {
  local pid=$1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

# Every server here stores its KV rows in pages of 16 tokens (the smallest page): the test
# models' rows are small, so at the default page size their states would never fill one
# page and every store path here would run on whole records only.
page_flag=--state_page_bytes=${E2E_STATE_PAGE_BYTES:-1}

# start_server ADDR METRICS_ADDR [SERVER FLAGS...]: starts the server in the background
# (server_pid, log in $work/server.log) and waits up to 10 s for health to say SERVING.
start_server() {
  local addr=$1 metrics=$2
  shift 2
  step "starting $server_bin on $addr (metrics on $metrics)"
  "$server_bin" --listen="$addr" --http_listen=127.0.0.1:0 --metrics_listen="$metrics" "$page_flag" "$@" >"$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 1 100); do
    "$client_bin" --server="$addr" --connect_timeout=0.1 health >/dev/null 2>&1 && break
    kill -0 "$server_pid" 2>/dev/null || fail "server exited during start-up"
    sleep 0.1
  done
  [ "$("$client_bin" --server="$addr" health)" = SERVING ] || fail "health is not SERVING"
}

# start_named NAME ADDR METRICS_ADDR [SERVER FLAGS...]: like start_server, for scripts that
# run several servers at once: the log is $work/NAME.log, the pid is left in started_pid.
start_named() {
  local name=$1 addr=$2 metrics=$3
  shift 3
  step "starting server $name on $addr (metrics on $metrics) $*"
  "$server_bin" --listen="$addr" --http_listen=127.0.0.1:0 --metrics_listen="$metrics" "$page_flag" "$@" >>"$work/$name.log" 2>&1 &
  started_pid=$!
  for _ in $(seq 1 150); do
    "$client_bin" --server="$addr" --connect_timeout=0.1 health >/dev/null 2>&1 && return 0
    kill -0 "$started_pid" 2>/dev/null || logs=$name fail "server $name exited during start-up"
    sleep 0.1
  done
  logs=$name fail "server $name is not SERVING after 15 s"
}

# wait_exit PID SECONDS: waits up to SECONDS for the background child PID to exit and
# leaves its exit status in exit_status; fails if it is still running then.
wait_exit() {
  local pid=$1 limit=$2 i
  for ((i = 0; i < limit * 20; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$pid" 2>/dev/null && fail "process $pid still running after ${limit}s"
  exit_status=0
  wait "$pid" 2>/dev/null || exit_status=$?
}

# start_redis PORT [REDIS FLAGS...]: Debian's redis-server on 127.0.0.1:PORT, data in
# $work/redis (no snapshots unless the flags ask), log $work/redis.log, pid in redis_pid;
# waits up to 10 s for PONG.
start_redis() {
  local port=$1
  shift
  mkdir -p "$work/redis"
  step "starting redis-server on 127.0.0.1:$port"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" --save "" \
    --appendonly no --daemonize no "$@" >>"$work/redis.log" 2>&1 &
  redis_pid=$!
  for _ in $(seq 1 100); do
    [ "$(redis-cli -p "$port" ping 2>/dev/null)" = PONG ] && return 0
    kill -0 "$redis_pid" 2>/dev/null || logs=redis fail "redis-server exited during start-up"
    sleep 0.1
  done
  logs=redis fail "redis-server on port $port does not answer PING after 10 s"
}

# python_stubs DIR: generates the Python gRPC stubs of proto/ into DIR (Debian's protoc
# and grpc_python_plugin); scripts then run Python with PYTHONPATH=DIR. Needs $repo.
python_stubs() {
  local plugin
  plugin=$(command -v grpc_python_plugin) ||
    fail "grpc_python_plugin not found (protobuf-compiler-grpc; deploy/install.sh)"
  mkdir -p "$1"
  protoc --python_out="$1" --grpc_python_out="$1" --plugin=protoc-gen-grpc_python="$plugin" \
    -I "$repo/proto" attnserve/v1/attnserve.proto attnserve/v1/model_config.proto ||
    fail "protoc"
}

# ---- turns held open by their reader (held_turn.py) ------------------------------------
# A turn that must stay in flight across an event (a drain, a SIGKILL, a store restart)
# is held by a reader the test controls, never made long: it pauses once the server's
# buffer and the reader's small flow-control window are full, and goes on only after
# `release`. Its max_tokens must exceed what those hold: about 120 one-byte tokens on a
# direct connection, about 8,000 through HAProxy.
e2e_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# held_turn ADDR NAME PROMPT [GENERATE FLAGS...]: in the background, a greedy turn of at
# most $max_tokens (default 24) tokens by the Python client through held_turn.py, which
# reads nothing until `release NAME`; bytes in NAME.out, stderr (the held call's line,
# then the finish line) in NAME.err, pid in held_pid.
held_turn() {
  local addr=$1 name=$2 prompt=$3
  shift 3
  [ -d "$work/stubs" ] || repo=${repo:-$(cd "$e2e_dir/../.." && pwd)} python_stubs "$work/stubs"
  PYTHONPATH="$work/stubs" "$py" "$e2e_dir/held_turn.py" "$work/$name.release" \
    --server="$addr" --timeout=120 generate --max_tokens="${max_tokens:-24}" "$@" \
    --prompt="$prompt" >"$work/$name.out" 2>"$work/$name.err" &
  held_pid=$!
}
# wait_first_token NAME: until the held turn NAME has written its first token (it is in
# flight, and stays so until released); fails after 60 s or if its client exited.
wait_first_token() {
  local deadline=$((SECONDS + 60))
  until [ -s "$work/$1.out" ]; do
    kill -0 "$held_pid" 2>/dev/null || [ -s "$work/$1.out" ] ||
      fail "the held turn $1 ended before its first token: $(cat "$work/$1.err")"
    [ "$SECONDS" -lt "$deadline" ] || fail "the held turn $1 wrote nothing in 60 s: $(cat "$work/$1.err")"
    sleep 0.05
  done
}
# release NAME: the held turn NAME reads on.
release() { touch "$work/$1.release"; }
# held_field NAME FIELD: held_tokens or end of the held call of turn NAME.
held_field() { sed -n "s/^\[held call: .*\b$2=\([^] ]*\).*/\1/p" "$work/$1.err" | head -n 1; }

# metric_of ADDR NAME [LABEL_REGEX]: the sum of every series of metric NAME on ADDR's
# /metrics whose labels match LABEL_REGEX.
metric_of() {
  "$py" - "$1" "$2" "${3:-}" <<'PY'
import re, sys, urllib.request
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
text = direct.open(f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
total = 0.0
for m in re.finditer(r'^' + re.escape(sys.argv[2]) + r'(\{[^}]*\})? (\S+)$', text, re.M):
    if re.search(sys.argv[3], m.group(1) or ""):
        total += float(m.group(2))
print(int(total))
PY
}

# wait_paused METRICS_ADDR N [LABEL_REGEX]: until attnserve_waiting_turns (turns paused
# because their client reads nothing more) of the matching models is at least N on
# METRICS_ADDR; fails after 60 s. A held turn counted there can no longer finish alone.
wait_paused() {
  local addr=$1 want=$2 labels=${3:-} deadline=$((SECONDS + 60)) got
  while :; do
    got=$(metric_of "$addr" attnserve_waiting_turns "$labels")
    [ "$got" -ge "$want" ] && return 0
    [ "$SECONDS" -lt "$deadline" ] ||
      fail "$got turn(s) paused on $addr after 60 s, expected $want (held turns that never filled their window: raise their max_tokens)"
    sleep 0.05
  done
}

# drain_reports LOG: how many drains the server logging to $work/LOG.log has reported:
# its "drain: saved" (or "saving ... failed") line comes once every turn was stopped.
drain_reports() { grep -c "attnserve: drain: sav" "$work/$1.log" || true; }
# wait_drain_report LOG BEFORE: until LOG holds more than BEFORE drain reports (60 s).
wait_drain_report() {
  local deadline=$((SECONDS + 60))
  until [ "$(drain_reports "$1")" -gt "$2" ]; do
    [ "$SECONDS" -lt "$deadline" ] || logs=$1 fail "no drain report in $1.log 60 s after SIGTERM"
    sleep 0.05
  done
}
