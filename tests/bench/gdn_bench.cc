// The Gated DeltaNet kernels (server/mixer/gdn_kernels.h) at a Qwen3.5-4B linear-attention
// layer's shape (16 key heads, 32 value heads, d_k = d_v = 128: a 2 MiB fp32 state per
// session and layer):
//  - GdnStep, the decode step: µs per session-layer at batch 1 and 8, and the GB/s at which
//    the state is read and written back (2 x 2 MiB per session-layer), beside an in-place
//    scale-and-add pass over the same bytes (the machine's read-modify-write bandwidth,
//    the step's roofline). Each call takes the next states of a ring of 128 MiB, over the
//    32 MiB L3, so the bytes come from memory.
//  - GdnPrefill (chunked, BLAS) against GdnPrefillReference (token by token) on a
//    512-token prompt: tokens/s of one layer; and against GdnStep token by token on
//    prompts of 1 to 64 tokens (by CPU time).
// Medians of --reps repetitions, wall time and the calling thread's CPU time (the machine
// is shared: wall time also counts the time other work held the core). One thread; the
// prefill's products run in whichever OpenBLAS kernels OPENBLAS_CORETYPE picks (printed).
// Prints markdown tables; asserts nothing, not a test.
//
// Usage: gdn_bench [--reps=7]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "tests/bench/bench_clock.h"
#include "server/attention/target_clones.h"
#include "server/mixer/gdn_kernels.h"

namespace mx = attnserve::mixer;

namespace {

using attnserve::bench::Now;
using attnserve::bench::CpuNow;
using attnserve::bench::Median;

constexpr int64_t kKeyHeads = 16, kValueHeads = 32, kDim = 128;
constexpr int64_t kRingBytes = int64_t(128) << 20;  // > L3: states come from memory

struct Layer {
  std::vector<float> ssm_a, dt_bias;
  mx::GdnWeights w;
  explicit Layer(std::mt19937& rng) : ssm_a(kValueHeads), dt_bias(kValueHeads) {
    std::uniform_real_distribution<float> uniform(0.0f, std::log(16.0f));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t h = 0; h < kValueHeads; ++h) {
      ssm_a[h] = -std::exp(uniform(rng)), dt_bias[h] = 0.5f * normal(rng);
    }
    w = {ssm_a.data(), dt_bias.data(), kKeyHeads, kValueHeads, kDim, kDim, 1e-6f};
  }
};

// Rows of q | k | v and b | alpha for `rows` tokens or sessions, random.
struct Rows {
  int64_t ld = 2 * kKeyHeads * kDim + kValueHeads * kDim, ldba = 2 * kValueHeads;
  std::vector<float> qkv, ba;
  Rows(int64_t rows, std::mt19937& rng) : qkv(rows * ld), ba(rows * ldba) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (float& v : qkv) v = normal(rng);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t h = 0; h < kValueHeads; ++h) {
        ba[i * ldba + h] = normal(rng);
        ba[i * ldba + kValueHeads + h] = normal(rng) - 2.0f;
      }
    }
  }
  mx::GdnInputs inputs() const {
    return {qkv.data(), qkv.data() + kKeyHeads * kDim, qkv.data() + 2 * kKeyHeads * kDim, ld,
            ba.data(),  ldba,                          ba.data() + kValueHeads,          ldba};
  }
};

// s = 0.999 s + 0.001 over n floats in place: the least a step over the state can cost.
ATTNSERVE_CLONES
void ScaleAndAdd(float* __restrict s, int64_t n) {
  for (int64_t e = 0; e < n; ++e) s[e] = 0.999f * s[e] + 0.001f;
}

// Median seconds per call of fn(call) over `calls` calls, `reps` times; wall and CPU.
template <typename Fn>
std::pair<double, double> Time(int reps, int calls, Fn fn) {
  std::vector<double> wall, cpu;
  for (int rep = 0; rep < reps; ++rep) {
    const double start = Now(), cpu_start = CpuNow();
    for (int c = 0; c < calls; ++c) fn(c);
    wall.push_back((Now() - start) / calls);
    cpu.push_back((CpuNow() - cpu_start) / calls);
  }
  return {Median(wall), Median(cpu)};
}

void StepTable(int reps, std::mt19937& rng) {
  const Layer layer(rng);
  const int64_t state_floats = mx::GdnStateFloats(layer.w);
  const int64_t state_bytes = state_floats * int64_t(sizeof(float));
  const int64_t ring = kRingBytes / state_bytes;
  std::vector<float> states(ring * state_floats);
  std::normal_distribution<float> normal(0.0f, 0.1f);
  for (float& v : states) v = normal(rng);
  std::printf("GdnStep: n_k %lld, n_v %lld, d_k = d_v = %lld; state %.2f MiB per session-layer; "
              "ring of %lld states (%lld MiB)\n\n",
              (long long)kKeyHeads, (long long)kValueHeads, (long long)kDim,
              double(state_bytes) / (1 << 20), (long long)ring, (long long)(kRingBytes >> 20));
  std::printf("| pass | batch | µs per session-layer | by CPU time | GB/s (read + write) | "
              "by CPU time |\n|---|---|---|---|---|---|\n");
  // Three passes over the ring, one after the other in each repetition so that each sees
  // the same share of the machine: the step of one session at a time, of 8 at a time, and
  // the roofline, one vectorised read-modify-write pass over the same states.
  const Rows rows(8, rng);
  std::vector<float> o(8 * kValueHeads * kDim);
  std::vector<float*> ptrs(8);
  int64_t next = 0;
  auto step = [&](int64_t batch) {
    for (int64_t c = 0; c < ring / batch; ++c) {
      for (int64_t b = 0; b < batch; ++b) ptrs[b] = &states[(next++ % ring) * state_floats];
      mx::GdnStep(layer.w, rows.inputs(), batch, ptrs.data(), o.data(), kValueHeads * kDim);
    }
  };
  auto scale_and_add = [&] {
    for (int64_t c = 0; c < ring; ++c) {
      ScaleAndAdd(&states[(next++ % ring) * state_floats], state_floats);
    }
  };
  std::vector<double> wall[3], cpu[3];
  for (int rep = 0; rep < reps; ++rep) {
    for (int pass = 0; pass < 3; ++pass) {
      const double start = Now(), cpu_start = CpuNow();
      if (pass == 2) {
        scale_and_add();
      } else {
        step(pass == 0 ? 1 : 8);
      }
      wall[pass].push_back((Now() - start) / double(ring));
      cpu[pass].push_back((CpuNow() - cpu_start) / double(ring));
    }
  }
  const char* names[3] = {"GdnStep | 1", "GdnStep | 8", "in-place scale-and-add | 1"};
  for (int pass = 0; pass < 3; ++pass) {
    const double per_wall = Median(wall[pass]), per_cpu = Median(cpu[pass]);
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f |\n", names[pass], per_wall * 1e6,
                per_cpu * 1e6, 2.0 * double(state_bytes) / per_wall / 1e9,
                2.0 * double(state_bytes) / per_cpu / 1e9);
  }
}

void PrefillTable(int reps, std::mt19937& rng) {
  const int64_t t = 512;
  const Layer layer(rng);
  const Rows rows(t, rng);
  const int64_t width = kValueHeads * kDim;
  std::vector<float> state(mx::GdnStateFloats(layer.w)), o(t * width);
  std::printf("\nGdnPrefill: one session, one layer, a %lld-token prompt from a zero state\n\n",
              (long long)t);
  std::printf("| path | ms | by CPU time | tokens/s | by CPU time |\n|---|---|---|---|---|\n");
  auto row = [&](const std::string& name, std::pair<double, double> s) {
    std::printf("| %s | %.1f | %.1f | %.0f | %.0f |\n", name.c_str(), s.first * 1e3,
                s.second * 1e3, double(t) / s.first, double(t) / s.second);
  };
  row("GdnPrefillReference (token by token)", Time(std::max(1, reps / 3), 1, [&](int) {
        std::fill(state.begin(), state.end(), 0.0f);
        mx::GdnPrefillReference(layer.w, rows.inputs(), t, state.data(), o.data(), width);
      }));
  for (int64_t chunk : {16, 32, 64, 128}) {
    row("GdnPrefill, chunk " + std::to_string(chunk), Time(reps, 1, [&](int) {
          std::fill(state.begin(), state.end(), 0.0f);
          mx::GdnPrefill(layer.w, rows.inputs(), t, chunk, state.data(), o.data(), width);
        }));
  }
  std::vector<float*> one = {state.data()};
  row("GdnStep, token by token", Time(reps, 1, [&](int) {
        std::fill(state.begin(), state.end(), 0.0f);
        for (int64_t i = 0; i < t; ++i) {
          mx::GdnInputs in = rows.inputs();
          in.q += i * in.ldqkv, in.k += i * in.ldqkv, in.v += i * in.ldqkv;
          in.b += i * in.ldb, in.alpha += i * in.ldalpha;
          mx::GdnStep(layer.w, in, 1, one.data(), o.data() + i * width, width);
        }
      }));
}

// Short prompts (a chat turn's new message, a prompt's remainder): µs per token of
// GdnPrefill (chunk 32) and of GdnStep token by token, one state warm in cache.
void ShortTable(int reps, std::mt19937& rng) {
  const Layer layer(rng);
  const int64_t most = 64, width = kValueHeads * kDim;
  const Rows rows(most, rng);
  std::vector<float> state(mx::GdnStateFloats(layer.w), 0.0f), o(most * width);
  std::vector<float*> one = {state.data()};
  std::printf("\nShort prefills: µs per token, one state in cache\n\n");
  std::printf("| tokens | GdnPrefill, chunk 32 | GdnStep, token by token |\n|---|---|---|\n");
  for (int64_t t : {1, 2, 4, 5, 8, 16, 64}) {
    const auto chunked = Time(reps * 3, 1, [&](int) {
      mx::GdnPrefill(layer.w, rows.inputs(), t, 32, state.data(), o.data(), width);
    });
    const auto stepped = Time(reps * 3, 1, [&](int) {
      for (int64_t i = 0; i < t; ++i) {
        mx::GdnInputs in = rows.inputs();
        in.q += i * in.ldqkv, in.k += i * in.ldqkv, in.v += i * in.ldqkv;
        in.b += i * in.ldb, in.alpha += i * in.ldalpha;
        mx::GdnStep(layer.w, in, 1, one.data(), o.data() + i * width, width);
      }
    });
    std::printf("| %lld | %.1f | %.1f |\n", (long long)t, chunked.second / double(t) * 1e6,
                stepped.second / double(t) * 1e6);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--reps=", 7) == 0) {
      reps = std::max(1, std::atoi(argv[i] + 7));
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header of gdn_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  std::mt19937 rng(2026);
  const char* core = std::getenv("OPENBLAS_CORETYPE");  // the prefill's products
  std::printf("Gated DeltaNet kernels, one thread, medians of %d repetitions; "
              "OPENBLAS_CORETYPE %s\n\n",
              reps, core != nullptr ? core : "<unset>");
  StepTable(reps, rng);
  PrefillTable(reps, rng);
  ShortTable(reps, rng);
  return 0;
}
