// PackedLinear's driver: picks the instruction set once, quantizes the activations once
// per call, and walks W in panels of outputs that stay in L2 while every tile of up to
// kMaxTileRows activation rows passes over them, so W streams from memory once per call
// whatever the row count.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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


inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// The threads PackedLinear splits outputs over: the caller runs part 0, pool thread k part
// k + 1. Workers spin briefly after a job (a decode step calls PackedLinear many times in
// a row), then sleep on the condition variable. One job at a time: run_mu_ is taken with
// try_lock, and a caller that finds it held runs alone.
class Pool {
 public:
  static Pool& Get() {
    static Pool* pool = new Pool;  // never destroyed: workers outlive static destructors
    return *pool;
  }
  void SetThreads(int threads) { threads_.store(std::max(1, threads)); }
  int threads() const { return threads_.load(std::memory_order_relaxed); }

  // Runs fn(part) for part in [0, parts); false (and nothing run) when the pool is busy.
  bool TryRun(int parts, const std::function<void(int)>& fn) {
    std::unique_lock<std::mutex> run(run_mu_, std::try_to_lock);
    if (!run.owns_lock()) return false;
    while (int(workers_.size()) < parts - 1) {
      const int k = int(workers_.size());
      workers_.emplace_back([this, k] { Work(k); });
    }
    job_.store(&fn);
    parts_.store(parts);
    remaining_.store(parts - 1);
    {
      std::lock_guard<std::mutex> l(mu_);
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    fn(0);
    while (remaining_.load() > 0) CpuRelax();
    return true;
  }

 private:
  void Work(int k) {
    uint64_t seen = 0;
    for (;;) {
      for (int spin = 0; spin < 4000 && generation_.load() == seen; ++spin) CpuRelax();
      if (generation_.load() == seen) {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return generation_.load() != seen; });
      }
      seen = generation_.load();
      if (k + 1 < parts_.load()) {
        (*job_.load())(k + 1);
        remaining_.fetch_sub(1);
      }
    }
  }

  std::atomic<int> threads_{1};
  std::mutex run_mu_;                    // held by the caller whose job runs
  std::vector<std::thread> workers_;     // guarded by run_mu_
  // The job, written under run_mu_ before generation_ moves on.
  std::atomic<const std::function<void(int)>*> job_{nullptr};
  std::atomic<int> parts_{1};
  std::atomic<int> remaining_{0};
  std::atomic<uint64_t> generation_{0};
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace

void SetPackedLinearThreads(int threads) { Pool::Get().SetThreads(threads); }

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
  // Outputs split in multiples of 16 (whole cache lines of y); small calls run alone.
  const int threads = Pool::Get().threads();
  const int64_t chunk = (w.out() + threads * 16 - 1) / (threads * 16) * 16;
  const int parts = int((w.out() + chunk - 1) / chunk);
  if (parts > 1 && w.out() * w.row_bytes() * rows >= (64 << 10)) {
    const std::function<void(int)> part = [&](int p) {
      RunPanels(k, w, a, rows, y, beta, p * chunk, std::min(w.out(), (p + 1) * chunk));
    };
    if (Pool::Get().TryRun(parts, part)) return;
  }
  RunPanels(k, w, a, rows, y, beta, 0, w.out());
}

}  // namespace attnserve::weights
