// KV-cache attention per stored type (--kv_cache_type), one layer of Qwen3-0.6B's shape
// (16 query heads on 8 KV heads of 128): the fused decode step (StepRaw: one session,
// one token) at several context lengths, and a 512-token prefill chunk (PrefillRaw) on
// top of a context. Prints a markdown table of medians: microseconds per step, the
// cache's bytes per step and the GB/s they are read at; asserts nothing, not a test.
//
//   build/tests/bench/kv_cache_bench [--reps=N]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tests/bench/bench_clock.h"
#include "server/attention/kv_kernels.h"
#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

using attnserve::bench::Median;

constexpr int kHeads = 16, kKvHeads = 8, kDim = 128;

std::unique_ptr<Attention> Make(KvCacheType type) {
  AttentionOptions o;
  o.module = "softmax";
  o.num_heads = kHeads;
  o.num_kv_heads = kKvHeads;
  o.head_dim = kDim;
  o.value_dim = kDim;
  o.chunk_size = 64;
  o.kv_cache_type = type;
  return std::move(CreateAttention(o)).value();
}

// A state of `attn` holding `context` tokens of random keys and values.
std::unique_ptr<AttentionState> Filled(const Attention& attn, int64_t context) {
  auto state = attn.NewState();
  for (int64_t done = 0; done < context;) {
    const int64_t t = std::min<int64_t>(1024, context - done);
    std::vector<float> q(t * kHeads * kDim), k(t * kKvHeads * kDim), v(t * kKvHeads * kDim);
    at::Tensor r = at::randn({int64_t(q.size() + k.size() + v.size())});
    const float* x = r.data_ptr<float>();
    std::copy_n(x, q.size(), q.data());
    std::copy_n(x + q.size(), k.size(), k.data());
    std::copy_n(x + q.size() + k.size(), v.size(), v.data());
    std::vector<float> out(t * kHeads * kDim), scratch(attn.PrefillScratchFloats(t));
    attn.PrefillRaw(*state, t, q.data(), k.data(), v.data(), out.data(), scratch.data());
    done += t;
  }
  return state;
}

}  // namespace
}  // namespace attnserve::attention

int main(int argc, char** argv) {
  using namespace attnserve::attention;
  int reps = 31;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::max(3, std::atoi(argv[i] + 7));
  }
  at::set_num_threads(1);
  at::manual_seed(1);
  std::printf("One layer, %d query heads on %d KV heads of %d; one thread; median of %d.\n\n",
              kHeads, kKvHeads, kDim, reps);
  std::printf("| KV cache | context | decode µs/step | cache MB read/step | GB/s | prefill 512 ms |\n");
  std::printf("|---|---|---|---|---|---|\n");
  for (int64_t context : {512, 4096, 16384}) {
    {
      // The layout before blocks and 16-bit types: one contiguous f32 cache per KV head,
      // one KvGroupAttend call over it (what StepRaw ran per head, the append aside).
      const int64_t len = context + 1, g = kHeads / kKvHeads;
      at::Tensor k = at::randn({kKvHeads, len, kDim}), v = at::randn({kKvHeads, len, kDim});
      std::vector<float> q(kHeads * kDim, 0.01f), out(kHeads * kDim), scores(g * len), sums(g);
      std::vector<double> step_us;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t j = 0; j < kKvHeads; ++j) {
          KvGroupAttend(q.data() + j * g * kDim, k[j].data_ptr<float>(), v[j].data_ptr<float>(),
                        g, len, kDim, kDim, scores.data(), out.data() + j * g * kDim, sums.data());
        }
        step_us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      const double us = Median(step_us);
      const double mb = double(len) * kKvHeads * 2 * kDim * 4 / 1e6;
      std::printf("| f32, one contiguous cache (before) | %lld | %.0f | %.1f | %.1f | - |\n",
                  static_cast<long long>(context), us, mb, mb / us * 1e3);
    }
    for (KvCacheType type :
         {KvCacheType::kF32, KvCacheType::kF16, KvCacheType::kBF16, KvCacheType::kQ8_0}) {
      auto attn = Make(type);
      auto state = Filled(*attn, context);
      std::vector<double> step_us, prefill_ms;
      std::vector<float> q(kHeads * kDim), k(kKvHeads * kDim), v(kKvHeads * kDim),
          out(kHeads * kDim), scratch(attn->StepScratchFloats(1));
      for (int r = 0; r < reps; ++r) {
        // Each rep on a checkpoint of the filled state: the same context every time.
        auto s = state->Checkpoint();
        std::vector<AttentionState*> states = {s.get()};
        std::fill(q.begin(), q.end(), 0.01f * r);
        std::fill(k.begin(), k.end(), 0.02f);
        const auto t0 = std::chrono::steady_clock::now();
        attn->StepRaw(states, q.data(), k.data(), v.data(), out.data(), scratch.data());
        step_us.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      for (int r = 0; r < std::max(3, reps / 10); ++r) {
        auto s = state->Checkpoint();
        const int64_t t = 512;
        std::vector<float> pq(t * kHeads * kDim, 0.01f), pk(t * kKvHeads * kDim, 0.02f),
            pv(t * kKvHeads * kDim, 0.03f), pout(t * kHeads * kDim),
            pscratch(attn->PrefillScratchFloats(t));
        const auto t0 = std::chrono::steady_clock::now();
        attn->PrefillRaw(*s, t, pq.data(), pk.data(), pv.data(), pout.data(), pscratch.data());
        prefill_ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      const double us = Median(step_us);
      const double mb = double(context + 1) * KvBytesPerToken(attn->options()) / 1e6;
      std::printf("| %s | %lld | %.0f | %.1f | %.1f | %.1f |\n", KvCacheTypeName(type),
                  static_cast<long long>(context), us, mb, mb / us * 1e3,
                  Median(prefill_ms));
      std::fflush(stdout);
    }
  }
  return 0;
}
