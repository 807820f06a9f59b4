// PackedLinear's driver: picks the instruction set once, quantizes the activations once
// per call, and walks W in panels of outputs that stay in L2 while every tile of up to
// kMaxTileRows activation rows passes over them, so W streams from memory once per call
// whatever the row count. One thread: splitting the outputs over two (a persistent pool,
// tried at 20f7d8e) gained nothing at one row on these shared 2-core machines
// (tests/bench/README.md, "Packed weights").
#include <algorithm>
#include <atomic>

#include "server/weights/linear_internal.h"

namespace attnserve::weights {
namespace {

// The bytes of W one panel holds: a share of the 1 MiB L2 that leaves room for the
// activation tiles.
constexpr int64_t kPanelBytes = 256 << 10;

std::atomic<LinearPath> forced_path{LinearPath::kAuto};

bool IsFloatType(WeightType type) {
  return type == WeightType::kF32 || type == WeightType::kF16 || type == WeightType::kBF16;
}

void StoreY(float* y, float sum, float beta) { *y = beta == 0.0f ? sum : beta * *y + sum; }

// Outputs [o_begin, o_end) of y (rows, out).
void RunPanels(const DotKernels& k, const PackedMatrix& w, const Activations& a, int64_t rows,
               float* y, float beta, int64_t o_begin, int64_t o_end) {
  const int64_t out = w.out();
  const int64_t panel = std::max<int64_t>(1, kPanelBytes / std::max<int64_t>(1, w.row_bytes()));
  for (int64_t o0 = o_begin; o0 < o_end; o0 += panel) {
    const int64_t o1 = std::min(o_end, o0 + panel);
    for (int64_t r0 = 0; r0 < rows; r0 += kMaxTileRows) {
      const int64_t tile = std::min<int64_t>(kMaxTileRows, rows - r0);
      const DotKernel dot = k.rows[tile - 1];
      float sums[kMaxTileRows];
      for (int64_t o = o0; o < o1; ++o) {
        dot(w.row(o), a, r0, sums);
        for (int64_t r = 0; r < tile; ++r) StoreY(&y[(r0 + r) * out + o], sums[r], beta);
      }
    }
  }
}


}  // namespace

LinearPath BestLinearPath() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const LinearPath best = [] {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni")) {
      return LinearPath::kAvx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return LinearPath::kAvx2;
    return LinearPath::kScalar;
  }();
  return best;
#else
  return LinearPath::kScalar;
#endif
}

void SetLinearPathForTesting(LinearPath path) { forced_path.store(path); }

void PackedLinear(const float* x, int64_t rows, const PackedMatrix& w, float* y, float beta,
                  LinearScratch& scratch) {
  if (rows <= 0 || w.out() == 0) return;
  LinearPath path = forced_path.load(std::memory_order_relaxed);
  if (path == LinearPath::kAuto) path = BestLinearPath();
  DotKernels k;
  if (path == LinearPath::kAvx512) k = Avx512Kernels(w.type());
  if (path == LinearPath::kAvx2) k = Avx2Kernels(w.type());
  if (k.rows[0] == nullptr) return PackedLinearScalar(x, rows, w, y, beta);
  Activations a;
  if (IsFloatType(w.type())) {
    a.in = w.in();
    a.x = x;
  } else {
    // The AVX-512 Q4_K / Q5_K kernels unpack 128 nibbles per load (their activation order).
    const bool k4 = w.type() == WeightType::kQ4_K || w.type() == WeightType::kQ5_K;
    a = QuantizeActivations(x, rows, w.in(), scratch, k4 && path == LinearPath::kAvx512);
  }
  RunPanels(k, w, a, rows, y, beta, 0, w.out());
}

}  // namespace attnserve::weights
