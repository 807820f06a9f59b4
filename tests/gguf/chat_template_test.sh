#!/usr/bin/env bash
# The llama3 chat template against node-llama-cpp's Llama 3 chat wrapper
# (chat_template_check.mjs). Usage: chat_template_test.sh CHAT_TEMPLATE_DUMP
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../node/node.sh"  # Node 20 or later first on PATH
[ -d "$here/node_modules/node-llama-cpp" ] ||
  { echo "$here/node_modules has no node-llama-cpp (deploy/install.sh installs it)" >&2; exit 1; }
node "$here/chat_template_check.mjs" "$1"
