#!/usr/bin/env bash
# Scale-out under failure, on loopback: a real redis-server (append-only file, so its data
# survives a restart), real HAProxy with deploy/haproxy/haproxy.cfg, three real
# attnserve_server replicas (--session_store=redis://... --persist=each_turn
# --lease_ttl=2s --shutdown_grace=1s), and a separate memory-only server for the
# uninterrupted references (greedy decoding is deterministic: the same prompts give the
# same bytes, batched or not).
#  1. Rolling restart: 32 conversations of 20 short turns (one paced `chat` client each)
#     and 6 of 6 longer turns run through the proxy while the three replicas are
#     restarted one at a time (SIGTERM, exit 0, start on the same port, up again in
#     HAProxy). Each drain also stops a turn held open on that replica by its reader
#     (held_turn.py: it reads nothing until the drain has stopped the turn,
#     FINISH_REASON_SHUTDOWN), which the client continues on another replica. Every
#     client exits 0 and every transcript equals the reference.
#  2. SIGKILL of the replica serving the most of 8 sessions (found by each replica's
#     attnserve_generated_tokens_total) while a held turn is in flight on each of its
#     sessions:
#     the next turn of every session through the proxy continues from its last completed
#     turn (the client retries while the dead replica's leases lapse), and again once the
#     replica is back.
#  3. A race, bypassing the proxy: for 40 rounds one turn on the same session is sent to
#     replica A and one to replica B at once. The turns never overlap (each successful
#     turn moved the session by exactly its own prompt + generated tokens from the turn
#     that completed before it), a refused turn leaves no trace, and replaying the
#     successful prompts in completion order on a memory-only server gives the same bytes.
#  4. redis-server restarted (SIGTERM, start again on the same port) while conversations
#     run through the proxy and a held turn is in flight (it finishes while Redis is
#     down): clients exit 0, transcripts equal the reference, every session stored before
#     is still in Redis.
#  5. A hybrid model (make_hybrid_gguf.py --chat's granitehybrid: Mamba-2 and attention
#     layers) served beside the default: a chat client resending its whole history
#     through HAProxy's HTTP frontend (turns spread over the replicas) finds the state the
#     last turn kept, whichever replica kept it, and answers as the memory-only server
#     prefilling everything; the same messages as a conversation answer the same
#     (tests/openai/sdk_check.mjs prefix); the replicas' attnserve_prompt_tokens_total
#     grows by only the uncached tokens, on more than one replica.
# No step depends on how fast the engine is: every turn that must outlive an event is
# held open by its reader, and every wait is for the thing itself (a finish line, a
# paused turn, a drain report), never a sleep.
# Finally no replica may have taken a stored copy over its own unsaved state (that throws
# away turns its clients were told had completed).
# Usage: scale_out_test.sh SERVER_BINARY CLIENT_BINARY
set -euo pipefail
server_bin=$1 client_bin=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
haproxy_cfg=$repo/deploy/haproxy/haproxy.cfg
test_name=scale_out_test logs="haproxy r1 r2 r3 redis"
work=$(mktemp -d)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/session_lib.sh"
source "$repo/tests/node/node.sh"  # Node 20 or later first on PATH (part 5)
redis_pid="" haproxy_pid="" ref_pid="" pids=() bg_pids=()
cleanup() {
  local pid
  for pid in "${bg_pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in "$haproxy_pid" "${pids[@]}" "$ref_pid" "$redis_pid"; do stop "$pid"; done
  if [ -n "${KEEP_WORK:-}" ]; then echo "$test_name: work dir kept: $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

command -v haproxy >/dev/null ||
  fail "haproxy not found: deploy/install.sh installs Debian's 'haproxy' (2.6)"
command -v redis-server >/dev/null ||
  fail "redis-server not found: deploy/install.sh installs Debian's 'redis-server'"
[ -d "$repo/tests/openai/node_modules/openai" ] ||
  fail "tests/openai/node_modules/openai is missing: deploy/install.sh installs it (npm ci)"
start=$SECONDS
mkfifo "$work/never"  # nobody writes it: `read -t` on it sleeps without starting a process
python_stubs "$work/stubs"  # for held_turn.py

# ===================================== helpers ==========================================
# wait_all SECONDS PID...: until every PID has exited (fails after SECONDS); leaves each
# exit status in status_of[PID].
declare -A status_of=()
cut_ref_pids=()
wait_all() {
  local limit=$1 pid alive
  shift
  local deadline=$((SECONDS + limit))
  while :; do
    alive=0
    for pid in "$@"; do kill -0 "$pid" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" -eq 0 ] && break
    [ "$SECONDS" -lt "$deadline" ] || fail "$alive client(s) still running after ${limit}s"
    sleep 0.2
  done
  for pid in "$@"; do
    status_of[$pid]=0
    wait "$pid" 2>/dev/null || status_of[$pid]=$?
  done
}

# feed PROMPTS PACE [TURN=FLAG...]: writes the lines of file PROMPTS one by one, PACE
# seconds apart; before line TURN waits (at most 90 s) for the file $work/FLAG.
feed() {
  local prompts=$1 pace=$2 n=0 line gate i
  shift 2
  exec 3<>"$work/never"
  while IFS= read -r line; do
    n=$((n + 1))
    for gate in "$@"; do
      [ "${gate%%=*}" = "$n" ] || continue
      for ((i = 0; i < 900; i++)); do
        [ -e "$work/${gate#*=}" ] && break
        read -r -t 0.1 -u 3 _ || true
      done
    done
    printf '%s\n' "$line"
    read -r -t "$pace" -u 3 _ || true
  done <"$prompts"
}

# conversations NAME VIA PACE GATES IDS...: one `chat --session=ID --keep --stats
# ${chat_flags[@]}` client per id against VIA, fed the lines of $work/NAME.ID.prompts by `feed PROMPTS PACE GATES`
# (GATES: one word, space-separated TURN=FLAG items). Output: $work/NAME.ID.out/.err;
# the clients' pids in chat_pids.
conversations() {
  local name=$1 via=$2 pace=$3 gates=$4 id
  shift 4
  chat_pids=()
  for id in "$@"; do
    mkfifo "$work/$name.$id.fifo"
    # shellcheck disable=SC2086  # gates: several words on purpose
    feed "$work/$name.$id.prompts" "$pace" $gates >"$work/$name.$id.fifo" 2>/dev/null &
    bg_pids+=($!)
    "$client_bin" --server="$via" --timeout=120 chat --session="$id" --keep --stats \
      "${chat_flags[@]}" <"$work/$name.$id.fifo" >"$work/$name.$id.out" \
      2>"$work/$name.$id.err" &
    chat_pids+=($!)
    bg_pids+=($!)
  done
}

# reference_chat NAME ID: the same prompts and chat_flags, unpaced, as one chat on the
# reference server (a session of its own); the transcript in $work/NAME.ID.ref.
reference_chat() {
  cli "$ref_addr" chat --stats "${chat_flags[@]}" <"$work/$1.$2.prompts" \
    >"$work/$1.$2.ref" 2>"$work/$1.$2.ref.err" ||
    logs=ref fail "reference chat $1 $2 failed: $(tail -n 3 "$work/$1.$2.ref.err")"
}

# check_conversations NAME TURNS PIDS... -- IDS...: every client exited 0 after TURNS
# finish lines, and its transcript equals the reference.
check_conversations() {
  local name=$1 turns=$2 i=0 id pid bad=0
  shift 2
  local -a cpids=() ids=()
  while [ "$1" != -- ]; do cpids+=("$1"); shift; done
  shift
  ids=("$@")
  for id in "${ids[@]}"; do
    pid=${cpids[i]}
    i=$((i + 1))
    if [ "${status_of[$pid]}" -ne 0 ]; then
      echo "$test_name: $name: conversation $id: the client exited ${status_of[$pid]}:" \
        "$(grep -v '^\[finish' "$work/$name.$id.err" | tail -n 3 | tr '\n' ' ')" >&2
      bad=$((bad + 1))
      continue
    fi
    local finished
    finished=$(grep -c '^\[finish=' "$work/$name.$id.err" || true)
    if [ "$finished" -ne "$turns" ]; then
      echo "$test_name: $name: conversation $id: $finished finish lines, expected $turns" >&2
      bad=$((bad + 1))
    elif ! cmp -s "$work/$name.$id.out" "$work/$name.$id.ref"; then
      echo "$test_name: $name: conversation $id: the transcript differs from the reference:" >&2
      diff <(cat -v "$work/$name.$id.ref") <(cat -v "$work/$name.$id.out") | head -n 8 >&2 || true
      paste -d' ' <(grep -o 'position=[0-9]*' "$work/$name.$id.ref.err") \
        <(grep -o 'position=[0-9]*' "$work/$name.$id.err") | head -n "$turns" |
        awk '$1 != $2 { print "  first differing turn " NR ": reference " $1 ", got " $2; exit }' >&2
      bad=$((bad + 1))
    fi
  done
  [ "$bad" -eq 0 ] || fail "$name: $bad of ${#ids[@]} conversations wrong (above)"
}

# wait_turns NAME TURNS IDS...: until each conversation NAME.ID has printed TURNS finish
# lines (the client's --stats, after each turn); fails after 120 s.
wait_turns() {
  local name=$1 turns=$2 id deadline=$((SECONDS + 120)) behind
  shift 2
  while :; do
    behind=0
    for id in "$@"; do
      [ "$(grep -c '^\[finish=' "$work/$name.$id.err" 2>/dev/null)" -ge "$turns" ] ||
        behind=$((behind + 1))
    done
    [ "$behind" -eq 0 ] && return 0
    [ "$SECONDS" -lt "$deadline" ] ||
      fail "$name: $behind conversation(s) have not finished $turns turns after 120 s"
    sleep 0.1
  done
}

# generated_counts: attnserve_generated_tokens_total of r1 r2 r3.
generated_counts() {
  local i out=()
  for i in 1 2 3; do out+=("$(metric_of "${metrics[i]}" attnserve_generated_tokens_total)"); done
  echo "${out[*]}"
}

# ================================== the stack ===========================================
# A held turn's max_tokens must exceed what the reader's window and HAProxy's buffers
# hold (about 8,000 one-byte tokens here), or it could finish while held: held_tokens.
# The default model, kjv-taylor2, has a fixed-size state, so its continuations and
# references generate that many at a constant cost per token.
held_tokens=40000
models_dir=$(cd "$(dirname "$0")/../../deploy/models" && pwd)
hybrid=granitehybrid-chat-f32
"$py" "$repo/tests/gguf/make_hybrid_gguf.py" --chat "$work/gguf" "$hybrid" | sed "s/^/  /" ||
  fail "make_hybrid_gguf.py --chat"
model_flags=(--model_dirs="$models_dir/kjv-taylor2,$work/gguf/$hybrid.gguf")
ref_addr=127.0.0.1:$(free_port) ref_http=127.0.0.1:$(free_port)
start_named ref "$ref_addr" "127.0.0.1:$(free_port)" --max_generated_tokens=200000 \
  --http_listen="$ref_http" "${model_flags[@]}"
ref_pid=$started_pid

redis_port=$(free_port)
redis_flags=(--appendonly yes --appendfsync always)
start_redis "$redis_port" "${redis_flags[@]}"
grpc=() metrics=() http=()
server_flags=(--session_store="redis://127.0.0.1:$redis_port" --persist=each_turn
  --lease_ttl=2s --shutdown_grace=1s --max_generated_tokens=200000 "${model_flags[@]}")
for i in 1 2 3; do
  grpc[i]=127.0.0.1:$(free_port) metrics[i]=127.0.0.1:$(free_port) http[i]=127.0.0.1:$(free_port)
  start_named "r$i" "${grpc[i]}" "${metrics[i]}" --http_listen="${http[i]}" "${server_flags[@]}"
  pids[i]=$started_pid
done

proxy=127.0.0.1:$(free_port) proxy_http=127.0.0.1:$(free_port)
socket=$work/haproxy.sock
step "starting haproxy $(haproxy -v | head -n 1 | awk '{print $3}') on $proxy (HTTP $proxy_http) with $haproxy_cfg"
ATTNSERVE_PROXY_BIND=$proxy HAPROXY_STATS_BIND=127.0.0.1:$(free_port) HAPROXY_RUNTIME_API=$socket \
  ATTNSERVE_S1=${grpc[1]} ATTNSERVE_S2=${grpc[2]} ATTNSERVE_S3=${grpc[3]} \
  ATTNSERVE_PROXY_HTTP_BIND=$proxy_http ATTNSERVE_H1=${http[1]} ATTNSERVE_H2=${http[2]} ATTNSERVE_H3=${http[3]} \
  haproxy -f "$haproxy_cfg" >"$work/haproxy.log" 2>&1 &
haproxy_pid=$!

source "$(dirname "$0")/haproxy_lib.sh"
all_up="s1=UP s2=UP s3=UP"
wait_states "$all_up" 20
[ "$(cli "$proxy" health)" = SERVING ] || fail "health through the proxy is not SERVING"

# home_turn VIA ID NAME PROMPT: turn NAME on session ID through VIA; leaves in `home` the
# one replica whose attnserve_generated_tokens_total grew meanwhile.
home_turn() {
  local before
  before=$(generated_counts)
  turn "$1" "$2" "$3" "$4"
  grown_replica "$before" "$(generated_counts)" "session $2: turn $3"
}

# grown_replica BEFORE AFTER WHAT: leaves in `home` the one replica (1-3) whose count in
# the generated_counts lines BEFORE -> AFTER grew; fails naming WHAT if none or several.
grown_replica() {
  local i
  read -r -a b <<<"$1"
  read -r -a a <<<"$2"
  home=""
  for i in 0 1 2; do
    if [ "$((a[i] - b[i]))" -gt 0 ]; then
      [ -z "$home" ] || fail "$3 counted on several replicas ($1 -> $2)"
      home=$((i + 1))
    fi
  done
  [ -n "$home" ] || fail "$3: no replica counted its tokens ($1 -> $2)"
}

# restart_replica I [AFTER_TERM_FLAG]: a turn through the proxy on cut_id[I] (a session
# served by rI) held open by its reader until rI counts it paused, SIGTERM, the reader
# released once rI reports its drain (the turn was stopped when the grace ran out:
# FINISH_REASON_SHUTDOWN, continued elsewhere by the client), exit 0 within 20 s, the
# same flags on the same ports again, and up in HAProxy within 20 s. Touches
# $work/AFTER_TERM_FLAG right after the SIGTERM.
restart_replica() {
  local i=$1 t0=$SECONDS drains
  max_tokens=$cut_tokens held_turn "$proxy" "cut.$i.2" "${cut_prompts[2]}" \
    --session="${cut_id[i]}" --ignore_eos
  cut_pid[i]=$held_pid
  bg_pids+=("$held_pid")
  wait_first_token "cut.$i.2"
  drains=$(drain_reports "r$i")
  step "  r$i: SIGTERM, a turn held open on it"
  kill -TERM "${pids[i]}"
  [ -z "${2:-}" ] || touch "$work/$2"
  wait_drain_report "r$i" "$drains"
  release "cut.$i.2"
  wait_exit "${pids[i]}" 20
  pids[i]=""
  [ "$exit_status" -eq 0 ] || logs=r$i fail "r$i exited with $exit_status after SIGTERM"
  { grep "drain: saved" "$work/r$i.log" || true; } | tail -n 1 | sed "s/^/$test_name:     r$i /"
  start_named "r$i" "${grpc[i]}" "${metrics[i]}" --http_listen="${http[i]}" "${server_flags[@]}"
  pids[i]=$started_pid
  wait_states "$all_up" 20
  step "  r$i: back and up in HAProxy after $((SECONDS - t0)) s"
}

# ============================ 1. rolling restart ========================================
words=(beginning heaven earth waters light darkness firmament seas grass seed fruit stars
  signs seasons days years fowl whales cattle image dominion garden river gold onyx)
conv_count=32 conv_turns=20 short_flags=(--max_tokens=10)
long_count=6 long_turns=6 long_flags=(--max_tokens=1500 --ignore_eos)
step "1. rolling restart: $conv_count conversations x $conv_turns short turns and $long_count x $long_turns long ones through the proxy"
convs=() lconvs=()
for c in $(seq 1 "$conv_count"); do
  id=$(new_session "$proxy")
  convs+=("$id")
  for t in $(seq 1 "$conv_turns"); do
    echo "Conversation $c, turn $t: the ${words[(c * 5 + t * 3) % ${#words[@]}]} $((c * 31 + t * 7))"
  done >"$work/roll.$id.prompts"
done
for c in $(seq 1 "$long_count"); do
  id=$(new_session "$proxy")
  lconvs+=("$id")
  for t in $(seq 1 "$long_turns"); do
    echo "Long conversation $c, part $t: the ${words[(c * 3 + t) % ${#words[@]}]}"
  done >"$work/long.$id.prompts"
done
# One session served by each replica, for the held turn that each drain stops; the held
# call gets what the buffers held, the client's continuation the rest.
cut_tokens=$held_tokens cut_prompts=("" "In the beginning" " And God said")
cut_id=() cut_pid=()
for _ in $(seq 1 30); do
  [ "${#cut_id[@]}" -eq 3 ] && break
  id=$(new_session "$proxy")
  max_tokens=12 home_turn "$proxy" "$id" "cut.$id.1" "${cut_prompts[1]}"
  [ -n "${cut_id[$home]:-}" ] && continue
  cut_id[home]=$id
  mv "$work/cut.$id.1.out" "$work/cut.$home.1.out"
  mv "$work/cut.$id.1.err" "$work/cut.$home.1.err"
done
[ "${#cut_id[@]}" -eq 3 ] || fail "30 sessions through the proxy, but not one on each replica: ${!cut_id[*]}"
step "  references on the memory-only server: the long conversations side by side, the short ones one at a time"
for i in 1 2 3; do
  (
    r=$(new_session "$ref_addr")
    max_tokens=12 turn "$ref_addr" "$r" "cut.ref.$i.1" "${cut_prompts[1]}"
    same_output "session ${cut_id[i]} turn 1" "cut.$i.1" "cut.ref.$i.1"
    max_tokens=$cut_tokens turn "$ref_addr" "$r" "cut.ref.$i.2" "${cut_prompts[2]}" --ignore_eos
  ) &
  cut_ref_pids+=($!)
  bg_pids+=($!)
done
chat_flags=("${long_flags[@]}")
ref_pids=()
for id in "${lconvs[@]}"; do
  reference_chat long "$id" &
  ref_pids+=($!)
  bg_pids+=($!)
done
chat_flags=("${short_flags[@]}")
for id in "${convs[@]}"; do reference_chat roll "$id"; done
wait_all 120 "${ref_pids[@]}" "${cut_ref_pids[@]}"
for pid in "${ref_pids[@]}" "${cut_ref_pids[@]}"; do
  [ "${status_of[$pid]}" -eq 0 ] || fail "a reference run failed (above)"
done

# Short turns 1-4 run before the first SIGTERM, 5-8 once r1 drains, 9-12 once r1 is back
# and r2 drains, 13-16 once r3 drains, 17-20 once all three are back; 0.5 s apart, so
# turns keep arriving while each replica drains, is down, and comes back. The long
# conversations run back to back (a drain may stop one of theirs: the client continues
# it on another replica), their last turn once all three are back.
roll_start=$SECONDS
redispatched() { grep -c ' [0-9]*/[0-9]*/[0-9]*/[0-9]*/+[0-9]* ' "$work/haproxy.log" || true; }
generate_calls() { grep -c 'AttnServe/Generate ' "$work/haproxy.log" || true; }
calls_before=$(generate_calls)
chat_flags=("${long_flags[@]}")
conversations long "$proxy" 0 "$long_turns=roll.done" "${lconvs[@]}"
long_pids=("${chat_pids[@]}")
chat_flags=("${short_flags[@]}")
conversations roll "$proxy" 0.5 "5=roll.r1 9=roll.r2 13=roll.r3 17=roll.done" "${convs[@]}"
roll_pids=("${chat_pids[@]}")
wait_turns roll 4 "${convs[@]}"
restart_replica 1 roll.r1
restart_replica 2 roll.r2
restart_replica 3 roll.r3
touch "$work/roll.done"
running=0
for pid in "${roll_pids[@]}"; do kill -0 "$pid" 2>/dev/null && running=$((running + 1)); done
step "  restarts done after $((SECONDS - roll_start)) s; $running conversations still running"
wait_all 120 "${roll_pids[@]}" "${long_pids[@]}" "${cut_pid[@]}"
check_conversations roll "$conv_turns" "${roll_pids[@]}" -- "${convs[@]}"
check_conversations long "$long_turns" "${long_pids[@]}" -- "${lconvs[@]}"
for i in 1 2 3; do
  [ "${status_of[${cut_pid[i]}]}" -eq 0 ] ||
    fail "the long turn stopped by r$i's drain (session ${cut_id[i]}) failed (exit ${status_of[${cut_pid[i]}]}): $(cat "$work/cut.$i.2.err")"
  [ "$(held_field "cut.$i.2" end)" = shutdown ] ||
    fail "the held turn on r$i was not stopped by its drain (finish=shutdown): $(cat "$work/cut.$i.2.err")"
  [ "$(finish_field "cut.$i.2" generated_tokens)" = "$cut_tokens" ] ||
    fail "the long turn stopped by r$i's drain: $(cat "$work/cut.$i.2.err")"
  same_output "the long turn stopped by r$i's drain and continued (session ${cut_id[i]})" "cut.$i.2" "cut.ref.$i.2"
done
extra=$(($(generate_calls) - calls_before - conv_count * conv_turns - long_count * long_turns - 3))
step "  all $((conv_count + long_count)) conversations and the 3 stopped long turns: clients exited 0, transcripts equal the references ($((SECONDS - roll_start)) s; HAProxy redispatched $(redispatched) requests; $extra Generate calls beyond one per turn: client retries and continuations)"

# ============================ 2. SIGKILL ================================================
step "2. SIGKILL of the replica serving some sessions, a held turn in flight on each"
k_prompts=("" "In the beginning God created" " And the earth was without form" " And God said"
  " Let there be light")
max_tokens=12
kill_count=8 kill_ids=()
declare -A home_of=()
on=(0 0 0 0)
for s in $(seq 1 "$kill_count"); do
  id=$(new_session "$proxy")
  kill_ids+=("$id")
  before=$(generated_counts)
  turn "$proxy" "$id" "kill.$s.1" "${k_prompts[1]} ($s)"
  turn "$proxy" "$id" "kill.$s.2" "${k_prompts[2]}"
  grown_replica "$before" "$(generated_counts)" "session $id: its two turns"
  home_of[$id]=$home
  on[home]=$((on[home] + 1))
  r=$(new_session "$ref_addr")
  turn "$ref_addr" "$r" "kill.$s.ref.1" "${k_prompts[1]} ($s)"
  turn "$ref_addr" "$r" "kill.$s.ref.2" "${k_prompts[2]}"
  turn "$ref_addr" "$r" "kill.$s.ref.3" "${k_prompts[3]}"
  turn "$ref_addr" "$r" "kill.$s.ref.4" "${k_prompts[4]}"
  same_output "session $id turn 2" "kill.$s.2" "kill.$s.ref.2"
done
victim=1  # the replica serving the most of them
for i in 2 3; do [ "${on[i]}" -gt "${on[victim]}" ] && victim=$i; done
victims=()
for s in $(seq 1 "$kill_count"); do
  [ "${home_of[${kill_ids[s - 1]}]}" = "$victim" ] && victims+=("$s")
done
step "  homes: $(for id in "${kill_ids[@]}"; do printf 'r%s ' "${home_of[$id]}"; done)-> kill r$victim (sessions ${victims[*]})"
long_pids=()
for s in "${victims[@]}"; do
  max_tokens=$held_tokens held_turn "$proxy" "kill.$s.long" " And it was so" \
    --session="${kill_ids[s - 1]}" --ignore_eos
  long_pids+=("$held_pid")
  bg_pids+=("$held_pid")
done
wait_paused "${metrics[victim]}" "${#victims[@]}"
lease_keys=$(redis-cli -p "$redis_port" --scan --pattern 'attnserve:lease:*' | wc -l)
kill -KILL "${pids[victim]}"
wait_exit "${pids[victim]}" 10
pids[victim]=""
[ "$exit_status" -eq 137 ] || fail "SIGKILLed r$victim exited with $exit_status"
step "  r$victim killed with ${#victims[@]} turn(s) in flight ($lease_keys lease key(s) in Redis)"
for s in "${victims[@]}"; do release "kill.$s.long"; done
wait_all 60 "${long_pids[@]}"
for pid in "${long_pids[@]}"; do
  [ "${status_of[$pid]}" -ne 0 ] || fail "a turn in flight on the killed replica reported success"
done
kill_t0=$SECONDS
for s in $(seq 1 "$kill_count"); do
  id=${kill_ids[s - 1]}
  turn "$proxy" "$id" "kill.$s.3" "${k_prompts[3]}"
  same_output "session $id (home r${home_of[$id]}) turn 3 after the SIGKILL" "kill.$s.3" "kill.$s.ref.3"
done
step "  turn 3 of all $kill_count sessions continued from turn 2 through the proxy ($((SECONDS - kill_t0)) s)"
start_named "r$victim" "${grpc[victim]}" "${metrics[victim]}" --http_listen="${http[victim]}" "${server_flags[@]}"
pids[victim]=$started_pid
wait_states "$all_up" 20
for s in $(seq 1 "$kill_count"); do
  id=${kill_ids[s - 1]}
  turn "$proxy" "$id" "kill.$s.4" "${k_prompts[4]}"
  same_output "session $id turn 4 after r$victim came back" "kill.$s.4" "kill.$s.ref.4"
done
step "  r$victim back: turn 4 of all $kill_count sessions equals the reference"

# ============================ 3. the race ===============================================
rounds=40
race_a=${grpc[1]} race_b=${grpc[2]}
step "3. race: $rounds rounds of one turn on r1 and one on r2 at once, same session"
race=$(new_session "$race_a")
race_tokens=32
waited_before=$(($(metric_of "${metrics[1]}" attnserve_store_leases_total 'outcome="waited"') +
  $(metric_of "${metrics[2]}" attnserve_store_leases_total 'outcome="waited"')))
both=0 one=0 none=0 order=() position=$(session_field "$race_a" "$race" position)
created_position=$position
race_t0=$SECONDS
for r in $(seq 1 "$rounds"); do
  "$client_bin" --server="$race_a" --timeout=60 --connect_timeout=10 generate --session="$race" --max_tokens=$race_tokens --ignore_eos \
    "Round $r on A: the ${words[r % ${#words[@]}]}" >"$work/race.$r.a.out" 2>"$work/race.$r.a.err" &
  pa=$!
  "$client_bin" --server="$race_b" --timeout=60 --connect_timeout=10 generate --session="$race" --max_tokens=$race_tokens --ignore_eos \
    "Round $r on B: the ${words[(r * 7) % ${#words[@]}]}" >"$work/race.$r.b.out" 2>"$work/race.$r.b.err" &
  pb=$!
  bg_pids+=("$pa" "$pb")
  wait_all 70 "$pa" "$pb"
  ok=()
  for side in a b; do
    pid=$([ $side = a ] && echo "$pa" || echo "$pb")
    name=race.$r.$side
    if [ "${status_of[$pid]}" -eq 0 ]; then
      ok+=("$(finish_field "$name" position) $name")
    else
      grep -Eq 'UNAVAILABLE|FAILED_PRECONDITION' "$work/$name.err" ||
        fail "round $r: the turn on $side failed otherwise (exit ${status_of[$pid]}): $(cat "$work/$name.err")"
      [ ! -s "$work/$name.out" ] ||
        fail "round $r: the refused turn on $side generated '$(show "$name")' before failing: $(cat "$work/$name.err")"
      step "  round $r: the turn on $side was refused: $(tr '\n' ' ' <"$work/$name.err")"
    fi
  done
  case ${#ok[@]} in 2) both=$((both + 1)) ;; 1) one=$((one + 1)) ;; 0) none=$((none + 1)) ;; esac
  # In completion order (the one that ended later is further along), each successful turn
  # moved the session by exactly its own prompt + generated tokens: never two at once.
  while read -r pos name; do
    [ -n "$name" ] || continue
    want=$((position + $(finish_field "$name" prompt_tokens) + $(finish_field "$name" generated_tokens)))
    [ "$pos" -eq "$want" ] ||
      fail "round $r: $name ended at position $pos, but the turn before ended at $position and it had $(finish_field "$name" prompt_tokens) prompt + $(finish_field "$name" generated_tokens) generated tokens (expected $want): two turns at once, or a lost turn. $(cat "$work/race.$r.a.err" "$work/race.$r.b.err" | tr '\n' ' ')"
    position=$pos
    order+=("$name")
  done < <(printf '%s\n' "${ok[@]}" | sort -n)
done
waited=$(($(metric_of "${metrics[1]}" attnserve_store_leases_total 'outcome="waited"') +
  $(metric_of "${metrics[2]}" attnserve_store_leases_total 'outcome="waited"') - waited_before))
step "  $rounds rounds in $((SECONDS - race_t0)) s: both turns succeeded (serialised) in $both, one refused in $one, both refused in $none; $waited lease(s) taken after waiting"
[ "$both" -gt 0 ] || fail "no round had both turns succeed"
[ $((waited + one + none)) -gt 0 ] ||
  fail "no round saw the other replica's turn (no lease waited for, nothing refused): the race was not exercised"
for via in "$race_a" "$race_b"; do
  got=$(session_field "$via" "$race" position)
  [ "$got" = "$position" ] ||
    fail "the race session is at position $got on $via, expected $position (creation $created_position + every successful turn)"
done
step "  replaying the ${#order[@]} successful turns in completion order on the memory-only server"
rr=$(new_session "$ref_addr")
k=0
for name in "${order[@]}"; do
  k=$((k + 1))
  side=${name##*.}
  r=${name#race.}
  r=${r%.*}
  if [ "$side" = a ]; then prompt="Round $r on A: the ${words[r % ${#words[@]}]}"
  else prompt="Round $r on B: the ${words[(r * 7) % ${#words[@]}]}"; fi
  max_tokens=$race_tokens turn "$ref_addr" "$rr" "replay.$k" "$prompt" --ignore_eos
  same_output "race turn $k ($name)" "$name" "replay.$k"
done
max_tokens=24 turn "$race_b" "$race" race.final " And the evening and the morning"
max_tokens=24 turn "$ref_addr" "$rr" replay.final " And the evening and the morning"
same_output "the race session's final continuation on r2" race.final replay.final
step "  every successful turn and the final continuation equal the replay"

# ============================ 4. Redis restarted ========================================
redis_count=6
step "4. redis-server restarted while $redis_count conversations run through the proxy"
rconvs=()
for c in $(seq 1 "$redis_count"); do
  id=$(new_session "$proxy")
  rconvs+=("$id")
  for t in $(seq 1 15); do
    echo "Redis test $c, turn $t: the ${words[(c * 11 + t) % ${#words[@]}]}"
  done >"$work/redis.$id.prompts"
  reference_chat redis "$id"
done
# And one session with a held turn in flight when Redis stops, released once Redis is
# down.
long_tokens=$held_tokens long_prompts=("" "In the beginning" " And God said" " And it was so")
long_id=$(new_session "$proxy")
max_tokens=24 turn "$proxy" "$long_id" redis.long.1 "${long_prompts[1]}"
rl=$(new_session "$ref_addr")
max_tokens=24 turn "$ref_addr" "$rl" redis.long.ref.1 "${long_prompts[1]}"
max_tokens=$long_tokens turn "$ref_addr" "$rl" redis.long.ref.2 "${long_prompts[2]}" --ignore_eos
max_tokens=24 turn "$ref_addr" "$rl" redis.long.ref.3 "${long_prompts[3]}"
# Turns 1-5 before the stop, 6-10 while Redis is down, 11-15 once it is back.
conversations redis "$proxy" 0.3 "6=redis.down 11=redis.up" "${rconvs[@]}"
redis_pids=("${chat_pids[@]}")
max_tokens=$long_tokens held_turn "$proxy" redis.long.2 "${long_prompts[2]}" \
  --session="$long_id" --ignore_eos
long_pid=$held_pid
bg_pids+=("$long_pid")
wait_first_token redis.long.2
wait_turns redis 5 "${rconvs[@]}"
redis-cli -p "$redis_port" ping >/dev/null
step "  stopping redis-server (SIGTERM)"
kill -TERM "$redis_pid"
wait_exit "$redis_pid" 10
[ "$exit_status" -eq 0 ] || logs=redis fail "redis-server exited with $exit_status after SIGTERM"
touch "$work/redis.down"
release redis.long.2
wait_all 90 "$long_pid"
wait_turns redis 10 "${rconvs[@]}"
step "  with Redis down: the held turn finished ($(finish_field redis.long.2 generated_tokens) tokens), every conversation finished turn 10"
start_redis "$redis_port" "${redis_flags[@]}"
touch "$work/redis.up"
step "  redis-server back on port $redis_port"
wait_all 90 "${redis_pids[@]}"
check_conversations redis 15 "${redis_pids[@]}" -- "${rconvs[@]}"
step "  all $redis_count conversations: clients exited 0, transcripts equal the references"
[ "${status_of[$long_pid]}" -eq 0 ] && [ "$(held_field redis.long.2 end)" = length ] ||
  fail "the turn in flight when Redis stopped failed (exit ${status_of[$long_pid]}): $(cat "$work/redis.long.2.err")"
same_output "the turn in flight when Redis stopped" redis.long.2 redis.long.ref.2
max_tokens=24 turn "$proxy" "$long_id" redis.long.3 "${long_prompts[3]}"
same_output "the turn after Redis came back" redis.long.3 redis.long.ref.3
step "  the long turn finished ($(finish_field redis.long.2 generated_tokens) tokens) and the next one continued it"
missing=0
for id in "${convs[@]}" "${kill_ids[@]}" "$race" "${rconvs[@]}" "$long_id"; do
  [ "$(redis-cli -p "$redis_port" exists "attnserve:session:$id")" = 1 ] || missing=$((missing + 1))
done
[ "$missing" -eq 0 ] || fail "$missing sessions are missing from Redis after its restart"
step "  every session of parts 1-4 is still in Redis"

# ============ 5. a hybrid chat resending its history through the proxy ==================
step "5. a chat on $hybrid resending its history through HAProxy's HTTP frontend"
prompt_counts() {
  local i out=()
  for i in 1 2 3; do
    out+=("$(metric_of "${metrics[i]}" attnserve_prompt_tokens_total "model=\"$hybrid\"")")
  done
  echo "${out[*]}"
}
read -r -a before <<<"$(prompt_counts)"
node "$repo/tests/openai/sdk_check.mjs" prefix "http://$proxy_http" "$hybrid" "http://$proxy_http" "http://$ref_http" \
  >"$work/prefix.out" 2>&1 || { cat "$work/prefix.out"; fail "sdk_check prefix through the proxy"; }
sed "s/^/$test_name:   /" "$work/prefix.out"
read -r -a after <<<"$(prompt_counts)"
read -r _ _ want_a _ want_b < <(grep "^prefilled A" "$work/prefix.out") || fail "prefix printed no prefilled line"
grown=0 total=0 spread=""
for i in 1 2 3; do
  d=$((after[i - 1] - before[i - 1]))
  total=$((total + d)) spread+="r$i $d, "
  [ "$d" -eq 0 ] || grown=$((grown + 1))
done
[ "$total" -eq $((want_a + want_b)) ] ||
  fail "the replicas prefilled $total prompt tokens of $hybrid (${spread%, }); the calls prefilled $((want_a + want_b))"
[ "$grown" -ge 2 ] || fail "the proxy sent every turn of the chat to one replica (${spread%, })"
step "  prompt tokens prefilled, uncached only: ${spread%, }"

for i in 1 2 3; do
  if grep -q "over this server's unsaved state" "$work/r$i.log"; then
    logs=r$i fail "r$i took another server's copy over its own unsaved state: $(grep "unsaved state" "$work/r$i.log" | head -n 3)"
  fi
done
for i in 1 2 3; do
  leases+="r$i: $(curl_leases=$(metric_of "${metrics[i]}" attnserve_store_leases_total 'outcome="lost"'); echo "$curl_leases") lost, "
done
step "leases reported lost since the last restarts: ${leases%, }"
step "all checks passed in $((SECONDS - start)) s"
