#!/usr/bin/env bash
# Real Prometheus scraping the real server: generate tokens with the sample client, then
# Prometheus's own query API must report sum(attnserve_generated_tokens_total) equal to
# the tokens the client received, and one open session with the state bytes the server
# reports for it; every query of the Grafana dashboard
# (deploy/grafana/dashboards/attnserve.json) must return finite values from it.
# Usage: prometheus_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
dashboard=$repo/deploy/grafana/dashboards/attnserve.json
prometheus_bin=${PROMETHEUS:-/usr/bin/prometheus}
test_name=prometheus_test logs="server prometheus"
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
prom_pid=""
trap 'stop "$prom_pid"; stop "$server_pid"; rm -rf "$work"' EXIT

[ -x "$prometheus_bin" ] || fail "$prometheus_bin not found (deploy/install.sh installs 'prometheus')"
grpc_port=$(free_port) metrics_port=$(free_port) prom_port=$(free_port)
addr=127.0.0.1:$grpc_port
prom=http://127.0.0.1:$prom_port
client() { "$client_bin" --server="$addr" "$@"; }
# query EXPR: prints Prometheus's JSON answer to an instant query.
query() {
  "$py" - "$prom" "$1" <<'PY'
import json, sys, urllib.parse, urllib.request
url = sys.argv[1] + "/api/v1/query?" + urllib.parse.urlencode({"query": sys.argv[2]})
try:
    direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback only
    print(direct.open(url, timeout=5).read().decode())
except Exception as e:  # a 400 (bad PromQL) or a refused connection
    body = e.read().decode() if hasattr(e, "read") else ""
    print(json.dumps({"status": "error", "error": f"{e} {body}".strip()}))
PY
}
# scalar_of JSON: the integer value of a one-series answer, or "none".
scalar_of() {
  "$py" -c '
import json, sys
try:
    result = json.loads(sys.argv[1])["data"]["result"]
    print(int(float(result[0]["value"][1])) if len(result) == 1 else "none")
except (ValueError, KeyError, IndexError, TypeError):
    print("none")' "$1"
}

# A dir: session store that spills idle sessions after 1 s, so the session-store panels
# see writes, reads, spills and deletes.
start_server "$addr" 127.0.0.1:$metrics_port --session_store="dir:$work/sessions" --spill_after=1s

step "starting $prometheus_bin on 127.0.0.1:$prom_port, scraping :$metrics_port every 1 s"
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: attnserve
    static_configs:
      - targets: ['127.0.0.1:$metrics_port']
EOF
"$prometheus_bin" --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:$prom_port >"$work/prometheus.log" 2>&1 &
prom_pid=$!

step "waiting for Prometheus to scrape the server (up == 1)"
up=none
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ]; do
  up=$(scalar_of "$(query 'up{job="attnserve"}')")
  [ "$up" = 1 ] && break
  kill -0 "$prom_pid" 2>/dev/null || fail "prometheus exited"
  sleep 0.2
done
[ "$up" = 1 ] || fail "Prometheus never saw the target up (last: $up)"

step "generating with the sample client"
received=0
usage_tokens() { sed -n 's/.*generated_tokens=\([0-9]*\).*/\1/p' "$1" | awk '{s+=$1} END {print s+0}'; }
for prompt in "In the beginning" "And then" "The end"; do
  client generate --max_tokens=30 --temperature=0.8 --seed=3 "$prompt" \
    >/dev/null 2>>"$work/client.err" || fail "generate failed: $(cat "$work/client.err")"
done
printf 'one\ntwo\n' | client chat --max_tokens=20 --stats >/dev/null 2>>"$work/client.err" ||
  fail "chat failed: $(cat "$work/client.err")"
received=$(usage_tokens "$work/client.err")
turns=$(grep -c 'finish=' "$work/client.err" || true)
[ "$turns" -eq 5 ] || fail "expected 5 finish lines, got $turns: $(cat "$work/client.err")"
[ "$received" -ge 5 ] || fail "the client received only $received tokens"

step "Prometheus must report sum(attnserve_generated_tokens_total) = $received (up to 20 s)"
seen=none
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ]; do
  seen=$(scalar_of "$(query 'sum(attnserve_generated_tokens_total)')")
  [ "$seen" = "$received" ] && break
  sleep 0.2
done
[ "$seen" = "$received" ] || fail "Prometheus reports $seen generated tokens, the client received $received"

step "an open session: Prometheus must report 1 active session and its state bytes"
sid=$(client sessions create) || fail "sessions create"
state_bytes=$(client sessions get "$sid" | sed -n 's/^state:.*(\([0-9]*\) bytes)$/\1/p')
[ -n "$state_bytes" ] && [ "$state_bytes" -gt 0 ] || fail "no state bytes for session $sid"
# Held busy by a turn its reader holds open: an idle session would spill after the
# server's --spill_after=1s, before a slow scrape saw it in memory.
held_turn "$addr" open "In the beginning" --session="$sid"
wait_first_token open
sessions=none bytes=none
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ]; do
  sessions=$(scalar_of "$(query 'sum(attnserve_active_sessions)')")
  bytes=$(scalar_of "$(query 'sum(attnserve_session_state_bytes)')")
  [ "$sessions" = 1 ] && [ "$bytes" = "$state_bytes" ] && break
  sleep 0.2
done
[ "$sessions" = 1 ] && [ "$bytes" = "$state_bytes" ] ||
  fail "Prometheus reports $sessions sessions and $bytes state bytes; expected 1 and $state_bytes"
release open
wait "$held_pid" || fail "the held turn: $(cat "$work/open.err")"

step "session store traffic: a session spills after 1 s idle, is read back, then closed"
spilled=$(client sessions create) || fail "sessions create"
client generate --session="$spilled" --max_tokens=5 "Abc" >/dev/null 2>>"$work/client.err" ||
  fail "generate on $spilled failed: $(cat "$work/client.err")"
seen=none
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ]; do
  seen=$(scalar_of "$(query 'sum(attnserve_sessions_spilled_total)')")
  in_memory=$(client sessions list | grep -c "$spilled" || true)
  [ "$in_memory" = 0 ] && [ "$seen" != none ] && [ "$seen" -ge 1 ] && break
  sleep 0.2
done
[ "$in_memory" = 0 ] || fail "the idle session $spilled did not leave memory"
[ -f "$work/sessions/$spilled.snap" ] || fail "the spilled session has no file in the store"
[ "$seen" != none ] && [ "$seen" -ge 1 ] || fail "no spilled session reported (last: $seen)"
client sessions get "$spilled" >/dev/null || fail "a spilled session could not be loaded back"
client sessions close "$spilled" || fail "closing the loaded session failed"
[ ! -e "$work/sessions/$spilled.snap" ] || fail "closing left the session's file in the store"
# A scrape taken after this traffic (a later second than now), so the rates over the
# window include it.
traffic_done=$(date +%s) scraped=none
deadline=$((SECONDS + 20))
while [ "$SECONDS" -lt "$deadline" ]; do
  scraped=$(scalar_of "$(query 'timestamp(up{job="attnserve"})')")
  [ "$scraped" != none ] && [ "$scraped" -gt "$traffic_done" ] && break
  sleep 0.2
done
[ "$scraped" != none ] && [ "$scraped" -gt "$traffic_done" ] ||
  fail "no scrape after the traffic within 20 s (last at $scraped, traffic done at $traffic_done)"

step "every query of $(basename "$dashboard") returns finite values (rates: some > 0)"
[ -f "$dashboard" ] || fail "no dashboard at $dashboard"
"$py" -c '
import json, sys
def walk(node):
    if isinstance(node, dict):
        if isinstance(node.get("expr"), str): print(node["expr"].replace("\n", " "))
        for v in node.values(): walk(v)
    elif isinstance(node, list):
        for v in node: walk(v)
walk(json.load(open(sys.argv[1])))' "$dashboard" >"$work/exprs"
[ -s "$work/exprs" ] || fail "the dashboard has no queries"
while IFS= read -r expr; do
  # Grafana's rate window variable; 60 s spans the generation above. A quantile over
  # buckets that did not move in the window would be NaN. $instance is the dashboard's
  # replica variable: "All" is the regex .* (its allValue).
  promql=${expr//\$__rate_interval/60s}
  answer=$(query "${promql//\$instance/.*}")
  verdict=$("$py" -c '
import json, math, sys
answer, is_rate = json.loads(sys.argv[1]), "rate(" in sys.argv[2]
# An error counter that stayed at zero is the healthy answer.
is_rate = is_rate and "errors_total" not in sys.argv[2]
if answer.get("status") != "success": sys.exit("error")
values = [float(r["value"][1]) for r in answer["data"]["result"]]
if not values: sys.exit("no series")
if not all(math.isfinite(v) for v in values): sys.exit(f"not finite: {values}")
if is_rate and max(values) <= 0: sys.exit(f"no rate above 0: {values}")
print(" ".join(f"{v:.4g}" for v in values))' "$answer" "$expr" 2>&1) ||
    fail "dashboard query: $expr -> $verdict; Prometheus answered $answer"
  echo "  [$verdict] $expr"
done <"$work/exprs"

step "the dashboard's replica variable lists the server (label_values of its query)"
variable=$("$py" -c '
import json, re, sys
[v] = [v for v in json.load(open(sys.argv[1]))["templating"]["list"] if v["name"] == "instance"]
metric, label = re.fullmatch(r"label_values\((\w+), (\w+)\)", v["query"]["query"]).groups()
print(metric, label, v["allValue"])' "$dashboard") || fail "no instance variable in the dashboard"
read -r metric label all_value <<<"$variable"
values=$("$py" - "$prom" "$metric" "$label" <<'PY'
import json, sys, urllib.parse, urllib.request
url = f"{sys.argv[1]}/api/v1/label/{sys.argv[3]}/values?" + urllib.parse.urlencode(
    {"match[]": sys.argv[2]})
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))
print(" ".join(json.loads(direct.open(url, timeout=5).read())["data"]))
PY
)
[ "$values" = "127.0.0.1:$metrics_port" ] && [ "$all_value" = ".*" ] ||
  fail "label_values($metric, $label) gives '$values' (allValue '$all_value'), expected 127.0.0.1:$metrics_port"
echo "prometheus_test: all checks passed"
