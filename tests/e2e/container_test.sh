#!/usr/bin/env bash
# shellcheck disable=SC2154,SC2015  # py, exit_status: lib.sh; compose_*: the generated compose.sh
# The container image for real, with podman (server/DESIGN.md §6; deploy/podman/README.md):
# builds deploy/Dockerfile (deploy/podman/attnserve-image.sh: the local debian:12 base
# made once with debootstrap, the image rebuilt only when its build input changed), then
#  1. one server container, as docker-compose.yml runs it: from the host, the real
#     client sees health SERVING, the models, /metrics, a generate, a session's turns, its
#     export and import (the imported copy continues exactly like the original); the
#     image's own HEALTHCHECK passes; the server runs as uid 10001; SIGTERM (`podman
#     stop`) with a turn held open by its reader (held_turn.py): health NOT_SERVING at
#     once, the turn stopped after the grace with its final message, exit code 0 long
#     before the stop timeout;
#  2. the scale stack of docker-compose.scale.yml: a Redis container, three replica
#     containers of the same image with the compose file's store and persistence settings,
#     an HAProxy container with deploy/haproxy/haproxy.cfg mounted where the compose file
#     mounts it. Through HAProxy: a conversation whose turns all land on one replica; that
#     replica's container is stopped (drain) during a held turn; the drain stops it and
#     another replica finishes it from Redis, the conversation continues there, and every turn's bytes
#     equal the same conversation on the single container (greedy). Then every container
#     stops with exit code 0.
# No registry is reachable: redis and haproxy are small local images built FROM the same
# debian:12 base with Debian's redis-server 7.0 and haproxy 2.6
# (deploy/podman/{redis,haproxy}.Containerfile). Every container runs on the host's
# network (no bridge networking here), so the compose file's service names become
# loopback addresses with free ports: redis:6379 -> 127.0.0.1:R in the replicas' store
# URL, attnserve-N:50051 -> 127.0.0.1:PN through ATTNSERVE_LISTEN and haproxy.cfg's
# ATTNSERVE_SN, haproxy's :50051/:8404/:9999 -> ATTNSERVE_PROXY_BIND, HAPROXY_STATS_BIND,
# HAPROXY_RUNTIME_API on 127.0.0.1 (the step lines print the mapping).
#
# Removes every container it started and the redis/haproxy images it built; keeps the
# base image and the attnserve image (reused by the next run while the build input is
# unchanged). Needs root (rootful podman), podman, runc, debootstrap.
# Usage: container_test.sh SERVER_BINARY CLIENT_BINARY
#   The server binary is not run (the image's own is); the client talks to the containers.
#   CONTAINER_TEST_IMAGE=IMAGE: test that image as it is, no build.
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=container_test logs=""
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo/deploy/podman/containers.conf}
pm() { podman --runtime=runc --cgroup-manager=cgroupfs "$@"; }

prefix=attnserve-ctest-$$
containers=() built_images=()
# Container logs into $work/NAME.log, for fail() to show.
save_logs() {
  local c
  for c in "${containers[@]}"; do pm logs "$c" >"$work/${c#"$prefix"-}.log" 2>&1 || true; done
}
eval "lib_$(declare -f fail)"
fail() {
  save_logs
  # Default: every container's log (none: a blank, so that lib.sh's default is not used).
  [ -n "$logs" ] || logs="$(for c in "${containers[@]}"; do echo "${c#"$prefix"-}"; done) "
  lib_fail "$@"
}
cleanup() {
  local c
  for c in "${containers[@]}"; do pm rm -f -t 0 "$c" >/dev/null 2>&1 || true; done
  for c in "${built_images[@]}"; do pm rmi -f "$c" >/dev/null 2>&1 || true; done
  rm -rf "$work"
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || fail "needs root: rootful podman (deploy/podman/README.md)"
for tool in podman runc debootstrap; do
  command -v "$tool" >/dev/null || fail "$tool not found (deploy/install.sh installs it)"
done
[ -x "$server_bin" ] || fail "no server binary $server_bin"
# What an earlier run left behind when it was killed (a ctest timeout skips the trap):
# its containers (which may hold ports) and stand-in images, if that process is gone.
for c in $(pm ps -a --format '{{.Names}}' 2>/dev/null | grep '^attnserve-ctest-[0-9]*-' || true); do
  pid=${c#attnserve-ctest-} pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || pm rm -f -t 0 "$c" >/dev/null 2>&1 || true
done
for i in $(pm images --format '{{.Repository}}' 2>/dev/null | grep '^localhost/attnserve-ctest-[0-9]*-' || true); do
  pid=${i#localhost/attnserve-ctest-} pid=${pid%%-*}
  kill -0 "$pid" 2>/dev/null || pm rmi -f "$i" >/dev/null 2>&1 || true
done
start=$SECONDS times=()
lap() { times+=("$1=$((SECONDS - lap_start))s"); lap_start=$SECONDS; }
lap_start=$SECONDS

# --- images ---------------------------------------------------------------------------------
if [ -n "${CONTAINER_TEST_IMAGE:-}" ]; then
  image=$CONTAINER_TEST_IMAGE
  step "testing $image as it is (CONTAINER_TEST_IMAGE)"
  pm image exists "$image" || fail "no image $image"
  "$repo/deploy/podman/base-image.sh" >"$work/base.log" 2>&1 || logs=base fail "base image"
else
  image=localhost/attnserve:latest
  step "base image and $image (deploy/podman/attnserve-image.sh)"
  "$repo/deploy/podman/attnserve-image.sh" "$image" >"$work/image.log" 2>&1 ||
    logs=image fail "building $image"
  sed "s/^/  /" "$work/image.log"
fi
lap images
# The image as the Dockerfile describes it: the HEALTHCHECK kept (docker format), the
# unprivileged user, the entrypoint, listening on every interface by default.
# (podman reports the health check beside the OCI config, not in it.)
config=$(pm image inspect "$image" | "$py" -c '
import json, sys
image = json.load(sys.stdin)[0]
c = image["Config"]
print(c.get("User") or "", json.dumps(c.get("Entrypoint")),
      json.dumps((image.get("Healthcheck") or {}).get("Test")), json.dumps(c.get("Env")), sep="|")') ||
  fail "podman image inspect $image"
IFS='|' read -r user entrypoint health_test env_json <<<"$config"
[ "$user" = 10001:10001 ] || fail "image user is '$user', expected 10001:10001"
[ "$entrypoint" = '["attnserve_server"]' ] || fail "image entrypoint is $entrypoint"
grep -q '"ATTNSERVE_LISTEN=0.0.0.0:50051"' <<<"$env_json" || fail "image env: $env_json"
grep -q '"ATTNSERVE_HTTP_LISTEN=0.0.0.0:8000"' <<<"$env_json" || fail "image env: $env_json"
grep -q 'attnserve_client.*health' <<<"$health_test" ||
  fail "image HEALTHCHECK is '$health_test' (podman build without --format docker drops it)"

for stand_in in redis haproxy; do
  step "building localhost/$prefix-$stand_in from deploy/podman/$stand_in.Containerfile"
  pm build --network=host --format docker --layers=false --force-rm -q -t "localhost/$prefix-$stand_in" \
    -f "$repo/deploy/podman/$stand_in.Containerfile" "$repo/deploy/podman" \
    >"$work/$stand_in-build.log" 2>&1 || logs=$stand_in-build fail "building the $stand_in image"
  built_images+=("localhost/$prefix-$stand_in")
done
lap stand-in-images

# OpenBLAS's core type, when the machine sets it (server/DESIGN.md §6), holds in the
# containers too: the reference turns and the scale turns must run the same kernels.
blas_env=()
[ -n "${OPENBLAS_CORETYPE:-}" ] && blas_env=(-e "OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE")

# run_container NAME [PODMAN RUN ARGS...] -- IMAGE [ARGS...]: detached, host network, the
# automatic health-check timer off (it needs systemd; `podman healthcheck run` still works).
run_container() {
  local name=$prefix-$1
  shift
  containers+=("$name")
  pm run -d --name "$name" --network=host "$@" >"$work/run-$name.out" 2>&1 ||
    fail "podman run $name: $(cat "$work/run-$name.out")"
}
state_of() { pm inspect --format '{{.State.Status}} {{.State.ExitCode}}' "$prefix-$1"; }
# wait_serving NAME ADDR: until the client sees SERVING at ADDR (the container running).
wait_serving() {
  local name=$1 addr=$2
  for _ in $(seq 1 300); do
    "$client_bin" --server="$addr" --connect_timeout=0.1 health >/dev/null 2>&1 && return 0
    [ "$(state_of "$name")" = "running 0" ] || fail "container $name exited: $(state_of "$name")"
    sleep 0.1
  done
  fail "container $name is not SERVING on $addr after 30 s"
}
# stop_container NAME TIMEOUT: `podman stop -t TIMEOUT`; leaves the seconds it took in
# stop_seconds (for the log), and fails unless the container exited by itself with code 0
# on SIGTERM. The exit code is the proof, not the time: a container that podman had to
# SIGKILL after TIMEOUT reports 137, while the seconds also count podman's own work, which
# on a loaded machine took 10 s for a redis that had exited 4 ms after its SIGTERM.
stop_container() {
  local name=$1 timeout=$2 before=$SECONDS state
  pm stop -t "$timeout" "$prefix-$name" >/dev/null 2>&1 || fail "podman stop $name"
  stop_seconds=$((SECONDS - before))
  state=$(state_of "$name")
  [ "$state" = "exited 0" ] || fail "container $name: '$state' after podman stop -t $timeout, expected exit code 0 (137: killed after the timeout)"
}
cli() {
  local addr=$1
  shift
  "$client_bin" --server="$addr" "$@"
}
# turn ADDR SESSION NAME PROMPT [FLAGS...]: one greedy turn of $max_tokens (default 24)
# tokens at most, bytes in NAME.out, the finish line in NAME.err; must exit 0.
turn() {
  local addr=$1 sid=$2 name=$3 prompt=$4
  shift 4
  cli "$addr" generate --session="$sid" --max_tokens="${max_tokens:-24}" "$@" "$prompt" \
    >"$work/$name.out" 2>"$work/$name.err" ||
    fail "turn $name on session $sid at $addr failed: $(cat "$work/$name.err")"
}
finish_field() { sed -n "s/.*\[.*\b$2=\([^] ]*\).*/\1/p" "$work/$1.err" | tail -n 1; }
same_turn() {
  local what=$1 a=$2 b=$3
  [ -s "$work/$a.out" ] || fail "$what: $a generated nothing ($(cat "$work/$a.err"))"
  cmp -s "$work/$a.out" "$work/$b.out" ||
    fail "$what: $a generated '$(head -c 200 "$work/$a.out" | cat -v)', $b '$(head -c 200 "$work/$b.out" | cat -v)'"
  [ "$(finish_field "$a" position)" = "$(finish_field "$b" position)" ] ||
    fail "$what: $a ended at position $(finish_field "$a" position), $b at $(finish_field "$b" position)"
}
session_position() {
  cli "$1" sessions get "$2" | sed -n 's/^position: *\([0-9]*\) tokens$/\1/p'
}
metric_sum() {  # metric_sum METRICS_ADDR REGEX: the sum of the matching samples
  "$py" - "$1" "$2" <<'PY'
import re, sys, urllib.request
text = urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
    f"http://{sys.argv[1]}/metrics", timeout=5).read().decode()
print(int(sum(float(m.group(1)) for m in re.finditer(sys.argv[2] + r" (\S+)$", text, re.M))))
PY
}
generate_calls() { metric_sum "$1" '^attnserve_requests_total\{[^}]*method="Generate"[^}]*\}'; }
# release_when_stopped NAME METRICS_ADDR: in the background (pid in releaser), releases the
# held turn NAME once the server there runs no turn (running or paused; twice in a row,
# as the two gauges are set one after the other) or no longer answers: its drain stopped
# the turn, whose final message now waits for the reader.
release_when_stopped() {
  local name=$1 addr=$2
  (
    zero=0
    while [ "$zero" -lt 2 ]; do
      n=$(metric_sum "$addr" '^attnserve_(running|waiting)_turns\{[^}]*\}' 2>/dev/null) || n=0
      if [ "$n" -eq 0 ]; then zero=$((zero + 1)); else zero=0; fi
      sleep 0.05
    done
    release "$name"
  ) &
  releaser=$!
}

# The conversation of both parts: short greedy turns, then a long one (held open by its
# reader when a replica is stopped: more tokens than the reader's window and HAProxy's
# buffers hold, up to ~10,000), then one more.
prompts=("In the beginning" "And the earth was" "Then he said" "And it came to pass")
long_prompt="Let there be light" long_tokens=30000

# --- 1. one server container ----------------------------------------------------------------
grpc=127.0.0.1:$(free_port) metrics=127.0.0.1:$(free_port) http=127.0.0.1:$(free_port)
# The image's HEALTHCHECK, as podman's --health-cmd (exec form: a JSON array; shell form:
# a string). If it names 127.0.0.1:50051 (the address the image listens on by default),
# the same command runs with the port the container listens on here.
health_cmd=$("$py" - "$health_test" "${grpc##*:}" <<'PY'
import json, sys
test = [a.replace("127.0.0.1:50051", "127.0.0.1:" + sys.argv[2]) for a in json.loads(sys.argv[1])]
print(json.dumps(test[1:]) if test[0] == "CMD" else test[1])
PY
) || fail "the image's HEALTHCHECK: $health_test"
step "single: $image on the host's network: gRPC $grpc, metrics $metrics (compose: 127.0.0.1:50051, :9464)"
run_container single --health-cmd "$health_cmd" --health-interval=disable "${blas_env[@]}" \
  -e ATTNSERVE_LISTEN="$grpc" -e ATTNSERVE_METRICS_LISTEN="$metrics" -e ATTNSERVE_HTTP_LISTEN="$http" \
  -e ATTNSERVE_SHUTDOWN_GRACE=2s -e ATTNSERVE_MAX_GENERATED_TOKENS=200000 \
  -e ATTNSERVE_MODEL_DIRS=/opt/attnserve/models/kjv-taylor2-decay,/opt/attnserve/models/kjv-softmax \
  "$image"
wait_serving single "$grpc"
lap single-start
[ "$(cli "$grpc" health)" = SERVING ] || fail "single: health is not SERVING"
pm healthcheck run "$prefix-single" >"$work/healthcheck.out" 2>&1 ||
  fail "single: the image's HEALTHCHECK ($health_cmd) fails: $(cat "$work/healthcheck.out")"
uid=$(pm exec "$prefix-single" sh -c 'id -u') || fail "single: podman exec"
[ "$uid" = 10001 ] || fail "single: the server runs as uid $uid, expected 10001"
[ "$(pm exec "$prefix-single" attnserve_client --server="$grpc" health)" = SERVING ] ||
  fail "single: the image's own client does not see SERVING"
cli "$grpc" models >"$work/models.out" || fail "single: models"
grep -q kjv-taylor2-decay "$work/models.out" || fail "single: models: $(cat "$work/models.out")"
[ "$(metric_sum "$metrics" '^attnserve_requests_total\{[^}]*method="ListModels"[^}]*\}')" -ge 1 ] ||
  fail "single: /metrics does not count the ListModels call"
step "single: the HTTP API on $http (compose: 127.0.0.1:8000)"
curl -sf "http://$http/health" >/dev/null || fail "single: HTTP /health"
curl -sf "http://$http/v1/models" | grep -q '"kjv-taylor2-decay"' || fail "single: HTTP /v1/models"
curl -sf -H 'content-type: application/json' -d '{"prompt":"In the beginning","max_tokens":4}' \
  "http://$http/v1/completions" | grep -q '"completion_tokens":4' || fail "single: HTTP /v1/completions"

step "single: generate, a session, its export and import"
cli "$grpc" generate --max_tokens=24 "In the beginning" >"$work/one.out" 2>"$work/one.err" ||
  fail "single: generate: $(cat "$work/one.err")"
[ -s "$work/one.out" ] && grep -q 'finish=\(length\|stop\)' "$work/one.err" ||
  fail "single: generate: '$(cat "$work/one.err")'"
ref=$(cli "$grpc" sessions create) || fail "single: sessions create"
for i in 0 1 2; do turn "$grpc" "$ref" "ref.$i" "${prompts[$i]}"; done
cli "$grpc" sessions export "$ref" "$work/ref.snapshot" 2>"$work/export.err" ||
  fail "single: sessions export: $(cat "$work/export.err")"
copy=$(cli "$grpc" sessions import "$work/ref.snapshot" 2>"$work/import.err") ||
  fail "single: sessions import: $(cat "$work/import.err")"
[ "$copy" != "$ref" ] && [ ${#copy} -eq 32 ] || fail "single: import printed '$copy'"
[ "$(session_position "$grpc" "$copy")" = "$(session_position "$grpc" "$ref")" ] ||
  fail "single: the imported session is not at the original's position"
turn "$grpc" "$ref" ref.3 "${prompts[3]}"
turn "$grpc" "$copy" copy.3 "${prompts[3]}"
same_turn "single: the imported session's next turn" copy.3 ref.3
# The rest of the reference conversation (compared with part 2).
max_tokens=$long_tokens turn "$grpc" "$ref" ref.long "$long_prompt" --ignore_eos
turn "$grpc" "$ref" ref.last "${prompts[0]}"
lap single-requests

step "single: podman stop -t 15 (SIGTERM) with a turn held open by its reader"
max_tokens=20000 held_turn "$grpc" drain "And God said" --ignore_eos
drain_pid=$held_pid
wait_paused "$metrics" 1
release_when_stopped drain "$metrics"
# Health while the container stops: NOT_SERVING during the grace, then no answer.
(
  for _ in $(seq 1 100); do
    cli "$grpc" --connect_timeout=0.5 health >>"$work/drain-health.out" 2>&1 && continue
    grep -q NOT_SERVING "$work/drain-health.out" && break
    sleep 0.05
  done
) &
poller=$!
stop_container single 15
wait "$poller" || true
grep -q NOT_SERVING "$work/drain-health.out" ||
  fail "single: health never said NOT_SERVING while draining: $(sort "$work/drain-health.out" | uniq -c)"
wait_exit "$drain_pid" 10
wait "$releaser" || true
[ "$(finish_field drain finish)" = shutdown ] && [ "$(held_field drain end)" = shutdown ] ||
  fail "single: the running turn ended with '$(cat "$work/drain.err")', expected finish=shutdown"
pm logs "$prefix-single" >"$work/single.log" 2>&1
grep -q "SIGTERM: shutting down (grace 2s)" "$work/single.log" &&
  grep -q "attnserve_server: stopped" "$work/single.log" ||
  logs=single fail "single: the log does not show the drain"
step "single: drained and exited 0 in ${stop_seconds}s (grace 2s, stop timeout 15s)"
lap single-drain

# --- 2. the scale stack ---------------------------------------------------------------------
# What docker-compose.scale.yml fixes for the replicas (store, persistence, hostnames,
# stop grace), for redis (command) and haproxy (config mount).
"$py" - "$repo/docker-compose.scale.yml" >"$work/compose.sh" <<'PY' || fail "reading docker-compose.scale.yml"
import shlex, sys, yaml
services = yaml.safe_load(open(sys.argv[1]))["services"]
def seconds(value):
    value = str(value)
    return int(value[:-1]) if value.endswith("s") else int(value)
out = {}
for i in (1, 2, 3):
    s = services[f"attnserve-{i}"]
    env = s["environment"]
    out[f"store"] = env["ATTNSERVE_SESSION_STORE"]
    out[f"persist"] = env["ATTNSERVE_PERSIST"]
    out[f"hostname{i}"] = s["hostname"]
    out["replica_stop"] = seconds(s["stop_grace_period"])
out["redis_command"] = " ".join(shlex.quote(a) for a in services["redis"]["command"])
mount = [v for v in services["haproxy"]["volumes"] if v.startswith("./deploy/haproxy/")][0]
source, target = mount.split(":")[:2]
out["haproxy_source"], out["haproxy_target"] = source, target
for key, value in out.items():
    print(f"compose_{key}={shlex.quote(str(value))}")
PY
source "$work/compose.sh"
redis_port=$(free_port)
store=${compose_store/redis:6379/127.0.0.1:$redis_port}
[ "$store" != "$compose_store" ] || fail "the replicas' store '$compose_store' does not name redis:6379"

step "scale: redis ($compose_redis_command) on 127.0.0.1:$redis_port (compose: redis:6379)"
eval "redis_command=($compose_redis_command)"
run_container redis "localhost/$prefix-redis" "${redis_command[@]}" \
  --bind 127.0.0.1 --port "$redis_port"
for _ in $(seq 1 100); do
  [ "$(pm exec "$prefix-redis" redis-cli -p "$redis_port" ping 2>/dev/null)" = PONG ] && break
  [ "$(state_of redis)" = "running 0" ] || fail "redis exited: $(state_of redis)"
  sleep 0.1
done
[ "$(pm exec "$prefix-redis" redis-cli -p "$redis_port" config get appendonly | tail -n 1)" = yes ] ||
  fail "redis: appendonly is not on (compose command not applied)"

replica_grpc=() replica_metrics=() replica_http=()
for i in 1 2 3; do
  replica_grpc[i]=127.0.0.1:$(free_port) replica_metrics[i]=127.0.0.1:$(free_port)
  replica_http[i]=127.0.0.1:$(free_port)
  hostname_var=compose_hostname$i
  step "scale: attnserve-$i (hostname ${!hostname_var}): gRPC ${replica_grpc[i]}, metrics" \
       "${replica_metrics[i]}, ATTNSERVE_SESSION_STORE=$store ATTNSERVE_PERSIST=$compose_persist"
  run_container "attnserve-$i" --hostname "${!hostname_var}" "${blas_env[@]}" \
    -e ATTNSERVE_SESSION_STORE="$store" -e ATTNSERVE_PERSIST="$compose_persist" \
    -e ATTNSERVE_LISTEN="${replica_grpc[i]}" -e ATTNSERVE_METRICS_LISTEN="${replica_metrics[i]}" \
    -e ATTNSERVE_HTTP_LISTEN="${replica_http[i]}" -e ATTNSERVE_SHUTDOWN_GRACE=1s -e ATTNSERVE_MAX_GENERATED_TOKENS=200000 \
    --health-interval=disable "$image"
done
for i in 1 2 3; do wait_serving "attnserve-$i" "${replica_grpc[i]}"; done

proxy=127.0.0.1:$(free_port) stats=127.0.0.1:$(free_port) runtime_api=127.0.0.1:$(free_port)
proxy_http=127.0.0.1:$(free_port)
step "scale: haproxy, $compose_haproxy_source mounted at $compose_haproxy_target: gRPC $proxy" \
     "(compose :50051), stats $stats (:8404), runtime API $runtime_api (:9999)"
run_container haproxy -v "$repo/${compose_haproxy_source#./}:$compose_haproxy_target:ro" \
  -e ATTNSERVE_PROXY_BIND="$proxy" -e HAPROXY_STATS_BIND="$stats" \
  -e HAPROXY_RUNTIME_API="ipv4@$runtime_api" -e ATTNSERVE_S1="${replica_grpc[1]}" \
  -e ATTNSERVE_S2="${replica_grpc[2]}" -e ATTNSERVE_S3="${replica_grpc[3]}" \
  -e ATTNSERVE_PROXY_HTTP_BIND="$proxy_http" -e ATTNSERVE_H1="${replica_http[1]}" \
  -e ATTNSERVE_H2="${replica_http[2]}" -e ATTNSERVE_H3="${replica_http[3]}" \
  "localhost/$prefix-haproxy"
# server_states: "s1=UP s2=UP s3=DOWN" from the runtime API (op state 2 is running).
server_states() {
  "$py" - "$runtime_api" <<'PY' | awk '
    NF > 6 && $1 ~ /^[0-9]+$/ { printf "%s%s=%s", sep, $4, ($6 == 2 ? "UP" : "DOWN"); sep = " " }'
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
s = socket.create_connection((host, int(port)), timeout=5)
s.sendall(b"show servers state attnserve\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
print(out.decode(), end="")
PY
}
wait_states() {
  local want=$1 limit=$2 states=""
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$deadline" ]; do
    states=$(server_states 2>/dev/null || true)
    [ "$states" = "$want" ] && return 0
    [ "$(state_of haproxy)" = "running 0" ] || fail "haproxy exited: $(state_of haproxy)"
    sleep 0.2
  done
  fail "haproxy's servers are '$states' after ${limit}s, expected '$want'"
}
wait_states "s1=UP s2=UP s3=UP" 20
[ "$(cli "$proxy" health)" = SERVING ] || fail "scale: health through haproxy is not SERVING"
step "scale: the HTTP API through haproxy on $proxy_http (compose :8000)"
deadline=$((SECONDS + 20))
until curl -sf "http://$proxy_http/v1/models" | grep -q '"kjv-taylor2-decay"'; do
  [ "$SECONDS" -lt "$deadline" ] || fail "scale: HTTP /v1/models through haproxy after 20 s"
  sleep 0.2
done
curl -sf -H 'content-type: application/json' -d '{"prompt":"In the beginning","max_tokens":4}' \
  "http://$proxy_http/v1/completions" | grep -q '"completion_tokens":4' ||
  fail "scale: HTTP /v1/completions through haproxy"
lap scale-start

step "scale: a conversation through haproxy"
# counts: Generate calls served by each replica (0 for one that was stopped).
stopped=""
counts() {
  local i out=""
  for i in 1 2 3; do
    if [ "$i" = "$stopped" ]; then out+="0 "; else out+="$(generate_calls "${replica_metrics[i]}") "; fi
  done
  echo "$out"
}
read -ra before <<<"$(counts)"
sid=$(cli "$proxy" sessions create) || fail "scale: sessions create through haproxy"
for i in 0 1 2 3; do turn "$proxy" "$sid" "scale.$i" "${prompts[$i]}"; done
read -ra after <<<"$(counts)"; home=""
for i in 0 1 2; do
  delta=$((after[i] - before[i]))
  if [ "$delta" -eq 4 ]; then home=$((i + 1)); elif [ "$delta" -ne 0 ]; then home=""; break; fi
done
[ -n "$home" ] || fail "scale: the 4 turns were not all on one replica (Generate calls ${before[*]} -> ${after[*]})"
step "scale: the session's turns are on attnserve-$home; stopping it (podman stop -t $compose_replica_stop) during a held $long_tokens-token turn"
read -ra before <<<"$(counts)"
max_tokens=$long_tokens held_turn "$proxy" scale.long "$long_prompt" --session="$sid" --ignore_eos
long_pid=$held_pid
wait_paused "${replica_metrics[home]}" 1
release_when_stopped scale.long "${replica_metrics[home]}"
stop_container "attnserve-$home" "$compose_replica_stop"
stopped=$home
pm logs "$prefix-attnserve-$home" >"$work/attnserve-$home.log" 2>&1
grep -q "drain: saved [1-9][0-9]* sessions to redis" "$work/attnserve-$home.log" ||
  logs=attnserve-$home fail "scale: attnserve-$home's drain did not save its sessions to redis"
step "scale: attnserve-$home drained and exited 0 in ${stop_seconds}s"
wait_exit "$long_pid" 60
wait "$releaser" || true
[ "$exit_status" -eq 0 ] && [ "$(held_field scale.long end)" = shutdown ] ||
  fail "scale: the held turn across the stop failed or was not stopped by the drain: $(cat "$work/scale.long.err")"
same_turn "scale: the turn running when attnserve-$home stopped" scale.long ref.long
read -ra after <<<"$(counts)"; continued=""
for i in 1 2 3; do
  if [ "$i" != "$home" ] && [ "${after[i - 1]}" -gt "${before[i - 1]}" ]; then
    continued+=" attnserve-$i"
  fi
done
[ -n "$continued" ] || fail "scale: no other replica continued the held turn the drain stopped"
step "scale: the held turn, stopped by the drain, was continued from redis on$continued"
expected="s1=UP s2=UP s3=UP"
expected=${expected/s$home=UP/s$home=DOWN}
wait_states "$expected" 10
read -ra before <<<"$(counts)"
turn "$proxy" "$sid" scale.last "${prompts[0]}"
read -ra after <<<"$(counts)"
served=$(( (after[0] - before[0]) + (after[1] - before[1]) + (after[2] - before[2]) ))
[ "$served" -eq 1 ] || fail "scale: the last turn: Generate calls ${before[*]} -> ${after[*]}"
for i in 0 1 2 3; do same_turn "scale: turn $i" "scale.$i" "ref.$i"; done
same_turn "scale: the turn after the stop" scale.last ref.last
[ "$(session_position "$proxy" "$sid")" = "$(finish_field ref.last position)" ] ||
  fail "scale: the session's position is not the reference's"
lap scale-conversation

step "scale: stopping the rest"
stopped_in=""
for i in 1 2 3; do
  if [ "$i" != "$home" ]; then
    stop_container "attnserve-$i" "$compose_replica_stop"
    stopped_in+=" attnserve-$i=${stop_seconds}s"
  fi
done
stop_container haproxy 10
stopped_in+=" haproxy=${stop_seconds}s"
stop_container redis 10
stopped_in+=" redis=${stop_seconds}s"
step "scale: all exited 0:$stopped_in"
lap scale-stop
for c in "${containers[@]}"; do pm rm "$c" >/dev/null 2>&1 || true; done
containers=()
echo "$test_name: times: ${times[*]}; total $((SECONDS - start))s"
echo "$test_name: all checks passed"
