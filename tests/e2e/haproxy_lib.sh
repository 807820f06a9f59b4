# HAProxy's runtime API for the proxy tests (sourced after lib.sh). The script sets
# socket (the admin socket deploy/haproxy/haproxy.cfg declares, via HAPROXY_RUNTIME_API)
# and haproxy_pid.

# runtime COMMAND: one command on the runtime API; prints the answer.
runtime() {
  "$py" - "$socket" "$1" <<'PY'
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.settimeout(5)
s.connect(sys.argv[1])
s.sendall(sys.argv[2].encode() + b"\n")
out = b""
while chunk := s.recv(65536):
    out += chunk
print(out.decode(), end="")
PY
}
# server_states: "s1=UP s2=UP s3=DOWN" from the runtime API (op state 2 is running).
server_states() {
  runtime "show servers state attnserve" 2>/dev/null | awk '
    NF > 6 && $1 ~ /^[0-9]+$/ { printf "%s%s=%s", sep, $4, ($6 == 2 ? "UP" : "DOWN"); sep = " " }'
}
# wait_states WANT SECONDS: until server_states is WANT.
wait_states() {
  local want=$1 limit=$2 states=""
  local deadline=$((SECONDS + limit))
  while [ "$SECONDS" -lt "$deadline" ]; do
    states=$(server_states || true)
    [ "$states" = "$want" ] && return 0
    kill -0 "$haproxy_pid" 2>/dev/null || fail "haproxy exited"
    sleep 0.1
  done
  fail "haproxy's servers are '$states' after ${limit}s, expected '$want'"
}
