// PackedLinear (server/weights) per weight type against fp32 Linear (step_kernels.h, one
// sgemv / sgemm through OpenBLAS) on the same shapes: GB/s of weight bytes at 1 row (a
// decode step of one session), time per call at 8 rows (a batched step), GFLOP/s at 512
// rows (a prefill block). Medians of --reps repetitions; at 1 and 8 rows each repetition
// cycles through enough copies of W to exceed the 32 MiB L3, so the bytes come from
// memory. The 1-row GB/s is also given by the calling thread's CPU time (the machine is
// shared: wall time counts time others held the core). Prints a markdown table per shape; asserts nothing.
//
// Usage: packed_linear_bench [--reps=5] [--types=Q8_0,Q4_K,...]
//                            [--shapes=2048x2048,5632x2048,...] (out x in)
#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/bench/bench_clock.h"
#include "server/model/step_kernels.h"
#include "server/weights/blocks.h"
#include "server/weights/half.h"
#include "server/weights/packed_matrix.h"

namespace w = attnserve::weights;

namespace {

using attnserve::bench::Now;
using attnserve::bench::CpuNow;
using attnserve::bench::Median;

constexpr int64_t kStreamBytes = int64_t(128) << 20;  // > L3: W comes from memory

// Random packed bytes whose fp16 scales are ordinary numbers (speed does not depend on
// the values; quantizing 40M values with the reference quantizer would take minutes).
w::PackedMatrix RandomPacked(w::WeightType type, int64_t out, int64_t in, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t bytes = out * w::RowBytes(type, in);
  std::vector<uint8_t> b(static_cast<size_t>(bytes));
  for (auto& v : b) v = uint8_t(rng());
  const int64_t bb = w::BlockBytes(type);
  auto half = [&](int64_t at) { w::StoreF16(&b[size_t(at)], 0.01f * (1.0f + std::fabs(normal(rng)))); };
  switch (type) {
    case w::WeightType::kF32:
      for (int64_t i = 0; i < bytes / 4; ++i) {
        const float f = normal(rng);
        std::memcpy(&b[size_t(4 * i)], &f, 4);
      }
      break;
    case w::WeightType::kF16:
      for (int64_t i = 0; i < bytes / 2; ++i) w::StoreF16(&b[size_t(2 * i)], normal(rng));
      break;
    case w::WeightType::kBF16:
      for (int64_t i = 0; i < bytes / 2; ++i) {
        const uint16_t h = w::F32ToBf16(normal(rng));
        std::memcpy(&b[size_t(2 * i)], &h, 2);
      }
      break;
    case w::WeightType::kQ8_0:
    case w::WeightType::kQ4_0:
      for (int64_t at = 0; at < bytes; at += bb) half(at);
      break;
    case w::WeightType::kQ4_K:
    case w::WeightType::kQ5_K:
      for (int64_t at = 0; at < bytes; at += bb) {
        half(at);
        half(at + 2);
      }
      break;
    case w::WeightType::kQ6_K:
      for (int64_t at = 0; at < bytes; at += bb) half(at + w::kQ6_KD);
      break;
  }
  return *w::PackedMatrix::Copy(type, out, in, b.data());
}

struct Figures {
  double gbs1 = 0, gbs1_cpu = 0, us1 = 0, us8 = 0, gflops512 = 0;
};

// fn(copy, rows) runs one call on copy `copy` of W.
template <typename Fn>
Figures Measure(int64_t out, int64_t in, int64_t bytes, int copies, int reps, Fn fn) {
  Figures f;
  std::vector<double> t1, t1_cpu, t8, t512;
  for (int rep = 0; rep < reps; ++rep) {
    for (int64_t rows : {1, 8}) {
      int calls = 0;
      const double start = Now(), cpu_start = CpuNow();
      do {
        for (int c = 0; c < copies; ++c, ++calls) fn(c, rows);
      } while (Now() - start < 0.15);
      (rows == 1 ? t1 : t8).push_back((Now() - start) / calls);
      if (rows == 1) t1_cpu.push_back((CpuNow() - cpu_start) / calls);
    }
    const double start = Now();
    fn(0, 512);
    t512.push_back(Now() - start);
  }
  f.us1 = Median(t1) * 1e6;
  f.gbs1 = double(bytes) / Median(t1) / 1e9;
  f.gbs1_cpu = double(bytes) / Median(t1_cpu) / 1e9;
  f.us8 = Median(t8) * 1e6;
  f.gflops512 = 2.0 * 512 * double(in) * double(out) / Median(t512) / 1e9;
  return f;
}

void Row(const char* name, int64_t bytes, const Figures& f) {
  std::printf("| %s | %.1f | %.1f | %.1f | %.0f | %.0f | %.1f |\n", name, double(bytes) / 1e6,
              f.gbs1, f.gbs1_cpu, f.us1, f.us8, f.gflops512);
  std::fflush(stdout);
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t comma = s.find(',', start);
    parts.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return parts;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::string types = "F32,F16,BF16,Q8_0,Q4_0,Q4_K,Q5_K,Q6_K";
  std::string shapes = "2048x2048,5632x2048,2048x5632,50257x768";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--reps=", 0) == 0) reps = std::atoi(a.c_str() + 7);
    else if (a.rfind("--types=", 0) == 0) types = a.substr(8);
    else if (a.rfind("--shapes=", 0) == 0) shapes = a.substr(9);
    else {
      std::fprintf(stderr, "unknown flag %s (see the header of packed_linear_bench.cc)\n", argv[i]);
      return 2;
    }
  }
  const w::WeightType all[] = {w::WeightType::kF32,  w::WeightType::kF16,  w::WeightType::kBF16,
                               w::WeightType::kQ8_0, w::WeightType::kQ4_0, w::WeightType::kQ4_K,
                               w::WeightType::kQ5_K, w::WeightType::kQ6_K};
  std::printf("PackedLinear, medians of %d repetitions\n", reps);
  for (const std::string& shape : Split(shapes)) {
    const int64_t out = std::atoll(shape.c_str());
    const int64_t in = std::atoll(shape.c_str() + shape.find('x') + 1);
    std::printf("\n(out, in) = (%lld, %lld)\n\n", (long long)out, (long long)in);
    std::printf("| weights | MB | 1 row GB/s | 1 row GB/s by CPU time | 1 row µs | 8 rows µs | "
                "512 rows GFLOP/s |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(size_t(512 * in)), y(size_t(512 * out)), scratch(size_t(512 * out));
    for (float& v : x) v = normal(rng);
    {  // fp32 through OpenBLAS
      const int64_t bytes = out * in * 4;
      const int copies = int(std::clamp<int64_t>((kStreamBytes + bytes - 1) / bytes, 1, 16));
      std::vector<std::vector<float>> ws(size_t(copies), std::vector<float>(size_t(out * in)));
      for (auto& wc : ws) {
        for (float& v : wc) v = normal(rng) * 0.05f;
      }
      Row("fp32 Linear (OpenBLAS)", bytes,
          Measure(out, in, bytes, copies, reps, [&](int c, int64_t rows) {
            attnserve::model::Linear(x.data(), rows, in, ws[size_t(c)].data(), out, y.data(), 0.0f,
                                     scratch.data());
          }));
    }
    for (const std::string& name : Split(types)) {
      const w::WeightType* type =
          std::find_if(std::begin(all), std::end(all),
                       [&](w::WeightType t) { return name == w::WeightTypeName(t); });
      if (type == std::end(all)) {
        std::fprintf(stderr, "unknown type %s\n", name.c_str());
        return 2;
      }
      if (in % w::BlockValues(*type) != 0) continue;
      const int64_t bytes = out * w::RowBytes(*type, in);
      const int copies = int(std::clamp<int64_t>((kStreamBytes + bytes - 1) / bytes, 1, 16));
      std::vector<w::PackedMatrix> ws;
      for (int c = 0; c < copies; ++c) ws.push_back(RandomPacked(*type, out, in, uint32_t(c)));
      w::LinearScratch ls;
      Row((std::string("PackedLinear ") + name).c_str(), bytes,
          Measure(out, in, bytes, copies, reps, [&](int c, int64_t rows) {
            w::PackedLinear(x.data(), rows, ws[size_t(c)], y.data(), 0.0f, ls);
          }));
    }
  }
  return 0;
}
