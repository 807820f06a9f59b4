#!/usr/bin/env bash
# The playground page (client/web/) in a real browser: Debian's chromium driven by
# playwright-core (npm, installed by deploy/install.sh into tests/browser/node_modules;
# never a downloaded browser) against the real attnserve_server with the shipped default
# model: two replicas sharing a real redis-server (a conversation made on one is listed,
# shown and continued on the other) and a server with API keys, which also serves a hybrid
# model (make_hybrid_gguf.py --chat's granitehybrid: Mamba-2 and attention layers).
# page_check.mjs says what is checked. Screenshots go to OUT_DIR (default: a new temp dir, kept), whose path is printed.
# Usage: page_test.sh SERVER_BINARY CLIENT_BINARY [OUT_DIR]
set -euo pipefail
server_bin=$1 client_bin=$2
test_name=browser_page
work=$(mktemp -d)
out=${3:-$(mktemp -d -t attnserve_page.XXXXXX)}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$repo/tests/e2e/lib.sh"
source "$repo/tests/node/node.sh"  # Node 20 or later first on PATH
r1_pid="" r2_pid="" k_pid="" redis_pid=""
trap 'stop "$r1_pid"; stop "$r2_pid"; stop "$k_pid"; stop "$redis_pid"; rm -rf "$work"' EXIT
logs="r1 r2 k"

[ -d "$here/node_modules/playwright-core" ] ||
  fail "$here/node_modules/playwright-core is missing: deploy/install.sh installs it (npm ci)"
[ -x /usr/bin/chromium ] || fail "/usr/bin/chromium is missing: deploy/install.sh installs Debian's chromium"

# The page as the binary embeds it; ATTNSERVE_WEB_DIR=DIR tests a directory instead.
web=()
[ -n "${ATTNSERVE_WEB_DIR:-}" ] && web=(--web_dir="$ATTNSERVE_WEB_DIR")
# A turn the page stops must stream until it is stopped, however fast the machine.
long=(--max_generated_tokens=60000)

redis_port=$(free_port)
start_redis "$redis_port"
store=redis://127.0.0.1:$redis_port
r1_addr=127.0.0.1:$(free_port) r1_http=127.0.0.1:$(free_port)
r2_addr=127.0.0.1:$(free_port) r2_http=127.0.0.1:$(free_port)
start_named r1 "$r1_addr" "127.0.0.1:$(free_port)" --http_listen="$r1_http" --session_store="$store" "${long[@]}" "${web[@]}"
r1_pid=$started_pid
start_named r2 "$r2_addr" "127.0.0.1:$(free_port)" --http_listen="$r2_http" --session_store="$store" "${long[@]}" "${web[@]}"
r2_pid=$started_pid

key=$(openssl rand -hex 24)
printf '%s page-tenant\n' "$key" >"$work/keys.txt"
hybrid=granitehybrid-chat-f32
"$py" "$repo/tests/gguf/make_hybrid_gguf.py" --chat "$work/gguf" "$hybrid" | sed "s/^/  /" ||
  fail "make_hybrid_gguf.py --chat"
k_addr=127.0.0.1:$(free_port) k_http=127.0.0.1:$(free_port)
start_named k "$k_addr" "127.0.0.1:$(free_port)" --http_listen="$k_http" --api_keys_file="$work/keys.txt" "${web[@]}" \
  --model_dirs="$repo/deploy/models/kjv-taylor2-decay,$work/gguf/$hybrid.gguf"
k_pid=$started_pid

step "the page in chromium (replicas http://$r1_http and http://$r2_http, keys on http://$k_http)"
mkdir -p "$out"
node "$here/page_check.mjs" "http://$r1_http" "http://$r2_http" "http://$k_http" "$key" "$out" "$hybrid" ||
  fail "page_check"
step "screenshots in $out"
step "PASS"
