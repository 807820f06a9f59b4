// Decode and prefill speed, and per-session state size, for the attention modules.
// Prints figures; asserts nothing. Run through tests/bench/run.sh (see
// tests/bench/README.md).
//
//   BM_Decode/<module>/<context>     one session, one token, at a given context length
//   BM_Prefill/<module>/<chunked>    a 1024-token prompt: chunked prefill vs token steps
//   BM_BatchedDecode/<module>/<B>    B sessions at context 256 stepping together
//
// <module>: 0 = softmax, 1 = taylor order 2, 2 = taylor order 4.
// Model: dim 64, 4 heads of 16, 2 layers, SwiGLU 192, byte vocabulary; one thread.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "server/model/model.h"

namespace attnserve::model {
namespace {

struct Variant {
  const char* label;
  const char* module;
  int order;
};
constexpr Variant kVariants[] = {{"softmax", "softmax", 0},
                                 {"taylor2", "taylor", 2},
                                 {"taylor4", "taylor", 4}};

const Model& GetModel(int variant) {
  static std::map<int, std::unique_ptr<Model>>* models = new std::map<int, std::unique_ptr<Model>>;
  auto& slot = (*models)[variant];
  if (!slot) {
    ModelConfig c;
    c.dim = 64;
    c.num_layers = 2;
    c.mlp_hidden = 192;
    c.attention.module = kVariants[variant].module;
    c.attention.order = kVariants[variant].order;
    c.attention.num_heads = 4;
    c.attention.num_kv_heads = 4;
    c.attention.head_dim = 16;
    c.attention.value_dim = 16;
    c.attention.chunk_size = 64;
    slot = std::move(Model::Create(c, 1)).value();
  }
  return *slot;
}

std::vector<int32_t> Tokens(int64_t n, int64_t offset = 0) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = int32_t('a' + (i * 7 + offset) % 26);
  return ids;
}

// A session prefilled to `context` tokens and stepped once (so a KV cache has spare
// capacity, as it does mid-conversation). Cached: prefilling 16k tokens is slow.
const DecodeState& Prefilled(int variant, int64_t context) {
  static auto* cache = new std::map<std::pair<int, int64_t>, std::unique_ptr<DecodeState>>;
  auto& slot = (*cache)[{variant, context}];
  if (!slot) {
    const Model& m = GetModel(variant);
    slot = m.NewState();
    (void)m.Prefill(*slot, Tokens(context - 1)).value();
    DecodeState* one[] = {slot.get()};
    (void)m.Step(one, {'a'}).value();
  }
  return *slot;
}

void BM_Decode(benchmark::State& state) {
  const int variant = int(state.range(0));
  const int64_t context = state.range(1);
  const Model& m = GetModel(variant);
  const DecodeState& snapshot = Prefilled(variant, context);
  for (auto _ : state) {
    state.PauseTiming();
    auto session = snapshot.Clone();  // every iteration decodes at the same context
    DecodeState* one[] = {session.get()};
    state.ResumeTiming();
    benchmark::DoNotOptimize(m.Step(one, {'q'}).value());
  }
  state.SetLabel(kVariants[variant].label);
  state.counters["context"] = double(context);
  state.counters["state_bytes"] = double(m.StateBytes(context));
  state.counters["allocated_bytes"] = double(snapshot.Bytes());
  state.counters["tokens/s"] = benchmark::Counter(double(state.iterations()),
                                                  benchmark::Counter::kIsRate);
}

void BM_Prefill(benchmark::State& state) {
  const int variant = int(state.range(0));
  const bool chunked = state.range(1) != 0;
  const Model& m = GetModel(variant);
  const std::vector<int32_t> prompt = Tokens(1024);
  for (auto _ : state) {
    state.PauseTiming();
    auto session = m.NewState();
    DecodeState* one[] = {session.get()};
    state.ResumeTiming();
    if (chunked) {
      benchmark::DoNotOptimize(m.Prefill(*session, prompt).value());
    } else {
      for (int32_t id : prompt) benchmark::DoNotOptimize(m.Step(one, {id}).value());
    }
  }
  state.SetLabel(std::string(kVariants[variant].label) + (chunked ? " chunked" : " stepwise"));
  state.counters["tokens/s"] = benchmark::Counter(double(state.iterations() * prompt.size()),
                                                  benchmark::Counter::kIsRate);
}

void BM_BatchedDecode(benchmark::State& state) {
  const int variant = int(state.range(0));
  const int64_t batch = state.range(1);
  const Model& m = GetModel(variant);
  const DecodeState& snapshot = Prefilled(variant, 256);
  const std::vector<int32_t> next = Tokens(batch, 3);
  for (auto _ : state) {
    state.PauseTiming();
    std::vector<std::unique_ptr<DecodeState>> owned;
    std::vector<DecodeState*> sessions;
    for (int64_t b = 0; b < batch; ++b) {
      owned.push_back(snapshot.Clone());
      sessions.push_back(owned.back().get());
    }
    state.ResumeTiming();
    benchmark::DoNotOptimize(m.Step(sessions, next).value());
  }
  state.SetLabel(kVariants[variant].label);
  state.counters["sessions"] = double(batch);
  state.counters["tokens/s"] = benchmark::Counter(double(state.iterations() * batch),
                                                  benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Decode)
    ->ArgsProduct({{0, 1, 2}, {128, 1024, 4096, 16384}})
    ->Iterations(200)
    ->Repetitions(9)
    ->ReportAggregatesOnly(true)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Prefill)
    ->ArgsProduct({{0, 1, 2}, {1, 0}})
    ->Iterations(2)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_BatchedDecode)
    ->ArgsProduct({{0, 1, 2}, {1, 8, 32}})
    ->Iterations(50)
    ->Repetitions(9)
    ->ReportAggregatesOnly(true)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace attnserve::model

int main(int argc, char** argv) {
  at::set_num_threads(1);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
