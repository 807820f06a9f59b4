#!/usr/bin/env bash
# Installs every system package attnserve needs on Debian 12, then points LibTorch's BLAS
# at OpenBLAS (serial build). Idempotent and non-interactive; run as root (or via sudo).
#
#   deploy/install.sh            build + test dependencies
#
# Why the serial OpenBLAS: the OpenMP build enlarges thread-local storage so much that
# prometheus-cpp's web server fails to create threads. Why not the reference BLAS: it is
# ~15-20x slower for our matrix shapes (see README, "BLAS").
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build ccache pkg-config git dpkg-dev
  # gRPC + Protobuf + abseil
  libgrpc++-dev libgrpc-dev protobuf-compiler protobuf-compiler-grpc libprotobuf-dev
  libabsl-dev
  # LibTorch (CPU) and a fast BLAS for it
  libtorch-dev libopenblas0-serial libopenblas-serial-dev
  # metrics
  prometheus-cpp-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
)

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

# Select OpenBLAS (serial) for libblas.so.3 / liblapack.so.3.
arch_triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -dumpmachine)
openblas_dir=/usr/lib/${arch_triplet}/openblas-serial
for lib in libblas.so.3 liblapack.so.3; do
  target=${openblas_dir}/${lib}
  current=$(readlink -f "/usr/lib/${arch_triplet}/${lib}" || true)
  if [ -e "$target" ] && [ "$current" != "$(readlink -f "$target")" ]; then
    $SUDO update-alternatives --set "${lib}-${arch_triplet}" "$target" >/dev/null
  fi
done
echo "install.sh: libblas.so.3 -> $(readlink -f /usr/lib/${arch_triplet}/libblas.so.3)"
