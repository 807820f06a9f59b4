#!/usr/bin/env bash
# The Python client's command line (`python3 -m attnserve`: the package in client/python,
# run from the checkout; tests/python/package_test.sh installs it) against the real
# server: its streamed bytes must equal the C++ client's for the same greedy and seeded
# requests, its multi-turn chat must equal `attnserve_client chat` and close its session,
# a turn on a session created by the C++ client must move that session, and errors must
# come back as the status codes (and exit codes) the C++ client reports. A turn under
# SamplingParams.constraint answers JSON that python3-jsonschema finds valid.
# client/python/attnserve_client.py, the script the package replaced, prints the same.
# Usage: python_client_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
test_name=python_client_test
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
trap 'stop "$server_pid"; rm -rf "$work"' EXIT

"$py" -c 'import grpc, google.protobuf' 2>/dev/null ||
  fail "$py lacks grpcio or protobuf (python3-grpcio, python3-protobuf)"

addr=127.0.0.1:$(free_port)
cxx() { "$client_bin" --server="$addr" "$@"; }
pyc() { PYTHONPATH="$repo/client/python" "$py" -m attnserve --server="$addr" "$@"; }
# finish lines without ttft_ms, which differs from run to run
finish_lines() { grep 'finish=' "$1" | sed 's/ ttft_ms=[0-9.]*//'; }

start_server "$addr" 127.0.0.1:$(free_port)

step "greedy generate: Python and C++ stream the same bytes"
prompt="In the beginning"
pyc generate --max_tokens=40 --prompt="$prompt" >"$work/py.out" 2>"$work/py.err" ||
  fail "python generate: $(cat "$work/py.err")"
cxx generate --max_tokens=40 "$prompt" >"$work/cxx.out" 2>"$work/cxx.err" ||
  fail "C++ generate: $(cat "$work/cxx.err")"
[ -s "$work/py.out" ] || fail "the Python client printed nothing"
cmp "$work/py.out" "$work/cxx.out" || fail "streamed bytes differ (Python vs C++)"
[ "$(finish_lines "$work/py.err")" = "$(finish_lines "$work/cxx.err")" ] ||
  fail "finish lines differ: $(cat "$work/py.err") vs $(cat "$work/cxx.err")"
echo "  $(wc -c <"$work/py.out") bytes, $(finish_lines "$work/py.err")"
"$py" "$repo/client/python/attnserve_client.py" --server="$addr" generate --max_tokens=40 \
  --prompt="$prompt" >"$work/script.out" 2>/dev/null || fail "attnserve_client.py generate"
cmp "$work/script.out" "$work/cxx.out" || fail "attnserve_client.py printed other bytes"

step "seeded sampling (temperature 0.8, seed 11): the same bytes"
pyc generate --max_tokens=40 --temperature=0.8 --seed=11 --prompt="$prompt" >"$work/pys.out" 2>/dev/null ||
  fail "python sampled generate"
cxx generate --max_tokens=40 --temperature=0.8 --seed=11 "$prompt" >"$work/cxxs.out" 2>/dev/null ||
  fail "C++ sampled generate"
cmp "$work/pys.out" "$work/cxxs.out" || fail "sampled bytes differ (Python vs C++)"
! cmp -s "$work/pys.out" "$work/py.out" || fail "sampling at 0.8 gave the greedy text"

step "multi-turn chat (3 turns on one session): the same as attnserve_client chat"
pyc chat --max_tokens=12 "first line" "second line" "third line" >"$work/pychat.out" \
  2>"$work/pychat.err" || fail "python chat: $(cat "$work/pychat.err")"
printf 'first line\nsecond line\nthird line\n' | cxx chat --max_tokens=12 --stats \
  >"$work/cxxchat.out" 2>"$work/cxxchat.err" || fail "C++ chat: $(cat "$work/cxxchat.err")"
cmp "$work/pychat.out" "$work/cxxchat.out" || fail "chat transcripts differ (Python vs C++)"
[ "$(finish_lines "$work/pychat.err" | wc -l)" -eq 3 ] || fail "expected 3 turns: $(cat "$work/pychat.err")"
[ "$(finish_lines "$work/pychat.err")" = "$(finish_lines "$work/cxxchat.err")" ] ||
  fail "chat finish lines differ: $(cat "$work/pychat.err") vs $(cat "$work/cxxchat.err")"
positions=$(sed -n 's/.*position=\([0-9]*\).*/\1/p' "$work/pychat.err" | tr '\n' ' ')
read -r p1 p2 p3 <<<"$positions"
[ "$p1" -lt "$p2" ] && [ "$p2" -lt "$p3" ] || fail "session positions do not grow: $positions"
echo "  positions after each turn: $positions"
sid=$(sed -n 's/^\[session \([0-9a-f]*\)\]$/\1/p' "$work/pychat.err")
[ ${#sid} -eq 32 ] || fail "no session id in: $(cat "$work/pychat.err")"
if cxx sessions get "$sid" >/dev/null 2>"$work/closed.err"; then fail "chat left session $sid open"; fi
grep -q NOT_FOUND "$work/closed.err" || fail "closed session: $(cat "$work/closed.err")"

step "a Python turn on a session the C++ client created"
sid=$(cxx sessions create)
pyc generate --session="$sid" --max_tokens=8 --prompt="Hello" >/dev/null 2>"$work/turn.err" ||
  fail "python turn on $sid: $(cat "$work/turn.err")"
want=$(sed -n 's/.*position=\([0-9]*\).*/\1/p' "$work/turn.err")
got=$(cxx sessions get "$sid" | sed -n 's/^position: *\([0-9]*\) tokens$/\1/p')
[ -n "$want" ] && [ "$got" = "$want" ] || fail "session position $got, the Python turn reported $want"
cxx sessions close "$sid" >/dev/null

step "errors: the status code and exit code of the C++ client"
expect_error() {  # expect_error CODE EXIT_STATUS PYTHON_ARGS... -- C++_ARGS...
  local code=$1 status=$2; shift 2
  local py_args=() rc=0
  while [ "$1" != -- ]; do py_args+=("$1"); shift; done; shift
  pyc "${py_args[@]}" >/dev/null 2>"$work/err.py" || rc=$?
  [ "$rc" -eq "$status" ] || fail "python ${py_args[*]}: exit $rc, expected $status: $(cat "$work/err.py")"
  grep -q "^attnserve: $code: " "$work/err.py" || fail "python ${py_args[*]}: $(cat "$work/err.py")"
  cxx "$@" >/dev/null 2>"$work/err.cxx" || true
  cmp -s "$work/err.py" "$work/err.cxx" ||
    fail "error messages differ: $(cat "$work/err.py") vs $(cat "$work/err.cxx")"
  echo "  $(cat "$work/err.py")"
}
expect_error INVALID_ARGUMENT 1 generate --temperature=-1 --prompt=x -- generate --temperature=-1 x
expect_error INVALID_ARGUMENT 1 generate --max_tokens=1000000 --prompt=x -- generate --max_tokens=1000000 x
unknown=0123456789abcdef0123456789abcdef
expect_error NOT_FOUND 1 generate --session=$unknown --prompt=x -- generate --session=$unknown x
rc=0
PYTHONPATH="$repo/client/python" "$py" -m attnserve \
  --server=127.0.0.1:$(free_port) --connect_timeout=0.5 generate --prompt=x 2>"$work/err.py" || rc=$?
[ "$rc" -eq 3 ] && grep -q "no connection" "$work/err.py" ||
  fail "unreachable server: exit $rc, $(cat "$work/err.py")"
echo "  $(cat "$work/err.py")"
rc=0
pyc generate 2>/dev/null || rc=$?
[ "$rc" -eq 2 ] || fail "missing --prompt: exit $rc, expected 2"

step "SamplingParams.constraint: JSON under a schema (python3-jsonschema validates it); a keyword outside the subset refused by name"
PYTHONPATH="$repo/client/python" "$py" - "$addr" <<'PY' || fail "constrained generate"
import json, sys
import grpc, jsonschema
import attnserve
from attnserve.v1 import attnserve_pb2 as pb

schema = {"type": "object", "additionalProperties": False,
          "properties": {"book": {"enum": ["Genesis", "Exodus"]}, "chapter": {"type": "integer"},
                         "verses": {"type": "array", "items": {"type": "integer"},
                                    "minItems": 1, "maxItems": 3},
                         "note": {"type": ["string", "null"], "maxLength": 10}},
          "required": ["book", "chapter", "verses", "note"]}
with attnserve.Client(sys.argv[1]) as client:
    finished = 0
    for seed in range(1, 7):
        turn = client.generate("In the beginning", temperature=1.0, seed=seed, max_tokens=600,
                               constraint=pb.Constraint(json_schema=json.dumps(schema)))
        turn.result()
        # Every text of this grammar is under 600 bytes (bounded whitespace and strings,
        # at most 16 digits): each turn ends because the value is complete.
        if turn.finish_reason != "stop":
            sys.exit(f"seed {seed}: finish_reason {turn.finish_reason}: {turn.text!r}")
        jsonschema.validate(json.loads(turn.text), schema)
        finished += 1
    print(f"  {finished} answers valid under the schema, e.g. {turn.text.decode()!r}")
    bad = dict(schema, properties=dict(schema["properties"], chapter={"type": "integer", "multipleOf": 3}))
    try:
        client.generate("x", constraint=pb.Constraint(json_schema=json.dumps(bad))).result()
        sys.exit("a schema with multipleOf 3 was served")
    except attnserve.Error as e:
        if e.code != grpc.StatusCode.INVALID_ARGUMENT or "'multipleOf'" not in e.details \
                or "/properties/chapter" not in e.details:
            sys.exit(f"multipleOf: {e}")
        print(f"  {e}")
PY

[ "$(cxx health)" = SERVING ] || fail "the server is no longer SERVING"
echo "python_client_test: all checks passed"
