// Roofline of the in-process engine: what each decode / prefill step costs against what
// this machine allows, all measured in the same run on one thread. --with_reference adds,
// under each decode row, the same step through Model::Step's LibTorch path
// (ATTNSERVE_REFERENCE_STEP=1), measured right after it; --weights_bf16 adds, under each
// decode row of at most 8 sessions, the same step reading bf16 copies of the weights
// (Model::UseBf16Weights; 2 bytes a weight in its limit); --state_bf16 adds, under each
// decode row of a fixed-state module, the same weights with their recurrent states kept
// in bf16 (AttentionOptions::state_bf16; 2 bytes a state element in its limit), followed
// by a line that sets the two steps' state traffic (bytes read and written per second)
// against the DRAM bandwidth. Prints a markdown table; writes the rows as JSON with --json=FILE (tests/bench/roofline_e2e.sh reads it).
// Asserts nothing. Run through `tests/bench/run.sh roofline` (see tests/bench/README.md).
//
// Machine, measured first:
//   bandwidth  best STREAM triad a[i] = b[i] + s * c[i] (STREAM's count: 3 * N * 4 bytes
//              per pass; write-allocate traffic not counted), one thread, over three
//              arrays of 4, 16, 64, 256 and 768 MiB in all; 768 MiB is well past the
//              caches (these VMs report a 480 MiB L3; 64 MiB already streams at DRAM speed)
//   sgemm      best of 5 at::mm of two 1024 x 1024 fp32 matrices (2 * n^3 FLOPs), the
//              BLAS LibTorch calls (libblas.so.3), one thread
//
// Shapes (untrained, created here, byte vocabulary V = 259):
//   tiny   dim 64,  2 layers, 4 heads of 16, SwiGLU 192   (deploy/models/kjv-taylor2)
//   mid    dim 256, 6 layers, 8 heads of 32, SwiGLU 768
//   large  dim 512, 8 layers, 8 heads of 64, SwiGLU 1536
// Modules: taylor order 2, softmax, linear; each with the shape's heads as KV heads, or
// with each count --kv_heads lists (grouped-query attention: the module label gains
// " kvN"). Workloads: decode of B = 1, 8, 32 sessions (--batches) at context 128
// (--context); chunked prefill of a 4096-token prompt (Model::Prefill, chunk 64 unless
// --chunk_size says otherwise) onto a fresh session and onto one at context 4096 (the
// 4k-8k stretch of a long prompt); decode of one session at context 4096 and 16384.
//
// Per step, with L layers, H query heads and Hkv KV heads of D (= Dv),
// W = L (2 dim H D + 2 dim Hkv D + 3 dim hidden) + V dim matrix weights (wq, wo; wk, wv;
// MLP; head: 4 dim^2 per layer for multi-head with dim = H D), m features per head
// (taylor C(D+2, 2), linear D), 4-byte floats (e = 4 bytes a state element; 2 under
// --state_bf16); the state is per KV head:
//   decode (B sessions, context c):
//     bytes = 4 W                                 weights, read once per step
//           + B L Hkv * 2 * e m (Dv + 1)          fixed state S and z, read and written
//             or B L Hkv * 4 (c + 1) (D + Dv)     KV cache, read (and one row written)
//     FLOPs = 2 B W                               projections, MLP, head
//           + B L (Hkv + H) * 2 m (Dv + 1)        fixed: S += phi_k v^T per KV head,
//                                                 phi_q^T S (+z) per query head
//             or B L H * 2 (c + 1) (D + Dv)       softmax: q k^T and p v per query head
//   prefill (T tokens, chunks of C, onto a session at context c):
//     bytes = 4 W + L Hkv * e m (Dv + 1)          weights once, state once
//           + 4 T (2 V + L (12 dim + 4 hidden))   activations written and read once
//     FLOPs = 2 T W
//           + T L (H 2 C (D + Dv) + (H + Hkv) 2 m (Dv + 1))  fixed: masked C x C block
//                                                            + state read and update
//             or L H * sum_p 2 (p + 1) (D + Dv), p = c .. c + T - 1          softmax
//     softmax bytes also count the cache read once per chunk: L Hkv 4 (D + Dv) T/C (c + T/2)
// Columns also give each row's state bytes per session (Model::StateBytes at the row's
// context) and tokens/s per session (1 / step time: what each of the B sessions sees).
// The limit of a step is max(bytes / bandwidth, FLOPs / sgemm peak); "% of limit" is
// limit / measured time. Two bandwidths: DRAM (768 MiB), and the one measured at the
// step's own footprint (the distinct bytes a step touches, weights and states counted
// once; interpolated in log(footprint) between the measured ones): weights and
// states that fit a cache are streamed from it on every step, so the DRAM limit is one a
// small model can beat. Element-wise work (norms, RoPE, features, softmax exp) is not
// counted: it is small next to the products, and it is part of what a step should hide.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "server/model/model.h"

namespace attnserve::model {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Best STREAM triad bandwidth in bytes/s over three arrays of `footprint` bytes in all,
// one thread. Repeated passes over a footprint that fits a cache level measure that level.
double MeasureBandwidth(size_t footprint) {
  const size_t n = footprint / 12;
  std::vector<float> a(n, 0.0f), b(n, 1.0f), c(n, 2.0f);
  const int reps = int(std::clamp<size_t>((size_t(2) << 30) / footprint, 10, 200));
  double best = 0;
  for (int rep = 0; rep < reps; ++rep) {
    const float s = 0.5f + float(rep % 7);
    auto t0 = Clock::now();
    float* __restrict pa = a.data();
    const float* __restrict pb = b.data();
    const float* __restrict pc = c.data();
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    auto t1 = Clock::now();
    best = std::max(best, 3.0 * double(n) * 4 / Seconds(t0, t1));
  }
  volatile float sink = a[n / 3];
  (void)sink;
  return best;
}

// Triad bandwidth by footprint, smallest first; the last is DRAM (768 MiB).
struct BandwidthCurve {
  std::vector<std::pair<double, double>> points;  // (footprint bytes, bytes/s)
  double Dram() const { return points.back().second; }
  // The bandwidth at `bytes` of footprint: interpolated in log(footprint) between the
  // two measured footprints around it (the end points beyond them).
  double At(double bytes) const {
    if (bytes <= points.front().first) return points.front().second;
    for (size_t i = 1; i < points.size(); ++i) {
      if (bytes <= points[i].first) {
        const auto& [x0, y0] = points[i - 1];
        const auto& [x1, y1] = points[i];
        const double f = std::log(bytes / x0) / std::log(x1 / x0);
        return y0 + f * (y1 - y0);
      }
    }
    return points.back().second;
  }
};

BandwidthCurve MeasureBandwidthCurve() {
  BandwidthCurve curve;
  for (size_t mib : {4, 16, 64, 256, 768}) {
    const double size = double(mib) * (1 << 20);
    curve.points.emplace_back(size, MeasureBandwidth(size_t(size)));
  }
  return curve;
}

// Best single-thread sgemm rate in FLOP/s (1024^3 through at::mm).
double MeasureSgemm() {
  const int64_t n = 1024;
  at::Tensor a = at::randn({n, n}), b = at::randn({n, n}), c = at::empty({n, n});
  at::mm_out(c, a, b);  // warm-up
  double best = 0;
  for (int rep = 0; rep < 5; ++rep) {
    auto t0 = Clock::now();
    at::mm_out(c, a, b);
    auto t1 = Clock::now();
    best = std::max(best, 2.0 * n * n * n / Seconds(t0, t1));
  }
  return best;
}

struct Shape {
  const char* name;
  int dim, layers, heads, head_dim, hidden;
  int reps;  // timed decode steps (prefill: a third, at least 1)
};
constexpr Shape kShapes[] = {{"tiny", 64, 2, 4, 16, 192, 41},
                             {"mid", 256, 6, 8, 32, 768, 31},
                             {"large", 512, 8, 8, 64, 1536, 11}};

struct Module {
  const char* label;
  const char* name;
  int order;
};
constexpr Module kModules[] = {{"taylor2", "taylor", 2}, {"softmax", "softmax", 0},
                               {"linear", "linear", 0}};

int g_chunk_size = 64;  // --chunk_size

// kv_heads: the model's num_kv_heads; 0: the shape's heads (multi-head). state_bf16: the
// fixed states in bf16.
std::unique_ptr<Model> MakeModel(const Shape& s, const Module& mod, int kv_heads = 0,
                                 bool state_bf16 = false) {
  ModelConfig c;
  c.dim = s.dim;
  c.num_layers = s.layers;
  c.mlp_hidden = s.hidden;
  c.attention.module = mod.name;
  c.attention.order = mod.order == 0 ? 2 : mod.order;
  c.attention.num_heads = s.heads;
  c.attention.num_kv_heads = kv_heads > 0 ? kv_heads : s.heads;
  c.attention.head_dim = s.head_dim;
  c.attention.value_dim = s.head_dim;
  c.attention.chunk_size = g_chunk_size;
  c.attention.max_state_bytes_per_layer = int64_t{1} << 30;
  c.attention.state_bf16 = state_bf16;
  return std::move(Model::Create(c, 1)).value();
}

std::vector<int32_t> Tokens(int64_t n, int64_t offset = 0) {
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = int32_t('a' + (i * 7 + offset) % 26);
  return ids;
}

// A session at `context` tokens. Up to 128 tokens are prefilled for real; beyond that a
// KV cache is extended with random keys and values (decode cost depends only on its
// length) and a fixed state is kept as it is at the longer position (its size and cost
// do not depend on the position).
std::unique_ptr<DecodeState> SessionAt(const Model& m, int64_t context) {
  auto st = m.NewState();
  const int64_t real = std::min<int64_t>(context, 128);
  (void)m.Prefill(*st, Tokens(real)).value();
  if (context == real) return st;
  std::vector<attention::NamedTensors> layers;
  for (int l = 0; l < st->num_layers(); ++l) {
    attention::NamedTensors t = st->layer(l).Tensors();
    for (auto& [name, tensor] : t) {
      if (HasFixedState(m.config().attention)) {
        tensor = tensor.clone();
      } else {  // (Hkv, real, D) -> (Hkv, context, D)
        at::Tensor extra = at::randn({tensor.size(0), context - real, tensor.size(2)}) * 0.5;
        tensor = at::cat({tensor, extra}, 1);
      }
    }
    layers.push_back(std::move(t));
  }
  return std::move(m.RestoreState(context, layers)).value();
}

struct Row {
  std::string shape, module, workload;
  int64_t batch = 1, tokens = 1;  // sessions; tokens per step
  double seconds = 0, bytes = 0, flops = 0;
  double footprint = 0;  // distinct bytes a step touches (weights, states once)
  double state_bytes_moved = 0;  // of `bytes`: the fixed states read and written
  int64_t state_bytes = 0;  // one session's state at the row's context (Model::StateBytes)
};

// Matrix weights W (see the header comment).
double MatrixWeights(const ModelConfig& c) {
  const auto& a = c.attention;
  const double q_width = double(a.num_heads) * a.head_dim;
  const double kv_width = double(a.num_kv_heads) * a.head_dim;
  return double(c.num_layers) *
             (2.0 * c.dim * q_width + 2.0 * c.dim * kv_width + 3.0 * c.dim * c.mlp_hidden) +
         double(c.vocab_size) * c.dim;
}

// Per-step traffic and work for decode (see the header comment).
// weight_bytes: 4 (fp32), or 2 where the step reads bf16 copies (--weights_bf16).
void DecodeCost(const ModelConfig& c, int64_t batch, int64_t context, Row& r,
                double weight_bytes = 4) {
  const double w = MatrixWeights(c);
  const auto& a = c.attention;
  const double lh = double(batch) * c.num_layers * a.num_heads;      // query heads
  const double lkv = double(batch) * c.num_layers * a.num_kv_heads;  // KV heads: the state
  const double m = double(attention::FeatureCount(a));
  const double e = double(attention::StateElementBytes(a));  // 4, or 2 under state_bf16
  r.bytes = weight_bytes * w;
  r.flops = 2 * batch * w;
  if (HasFixedState(a)) {
    r.state_bytes_moved = lkv * 2 * e * m * (a.value_dim + 1);
    r.bytes += r.state_bytes_moved;
    r.flops += (lkv + lh) * 2 * m * (a.value_dim + 1);
    r.footprint = weight_bytes * w + lkv * e * m * (a.value_dim + 1);
  } else {
    r.bytes += lkv * 4 * double(context + 1) * (a.head_dim + a.value_dim);
    r.flops += lh * 2 * double(context + 1) * (a.head_dim + a.value_dim);
    r.footprint = r.bytes;
  }
}

void PrefillCost(const ModelConfig& c, int64_t t, int64_t context, Row& r) {
  const double w = MatrixWeights(c);
  const auto& a = c.attention;
  const double lh = double(c.num_layers) * a.num_heads;
  const double lkv = double(c.num_layers) * a.num_kv_heads;
  const double m = double(attention::FeatureCount(a));
  r.bytes = 4 * w + 4.0 * t * (2.0 * c.vocab_size + c.num_layers * (12.0 * c.dim + 4.0 * c.mlp_hidden));
  r.flops = 2.0 * t * w;
  if (HasFixedState(a)) {
    r.bytes += lkv * double(attention::StateElementBytes(a)) * m * (a.value_dim + 1);
    r.flops += t * (lh * 2.0 * a.chunk_size * (a.head_dim + a.value_dim) +
                    (lh + lkv) * 2 * m * (a.value_dim + 1));
  } else {
    // sum over positions p = context .. context + t - 1 of 2 (p + 1) (D + Dv), plus the
    // cache read once per chunk of queries.
    const double end = double(context + t), begin = double(context);
    r.flops += lh * (end * (end + 1) - begin * (begin + 1)) * (a.head_dim + a.value_dim);
    r.bytes += lkv * 4.0 * (a.head_dim + a.value_dim) *
               (double(t) / a.chunk_size) * (begin + double(t) / 2);
  }
  r.footprint = r.bytes;
}

// Median time of one Step over `batch` sessions at `context`, after two untimed steps
// (a KV cache's first append after a restore or clone reallocates it).
double TimeDecode(const Model& m, int64_t batch, int64_t context, int reps) {
  auto first = SessionAt(m, context);
  std::vector<std::unique_ptr<DecodeState>> owned;
  std::vector<DecodeState*> sessions;
  for (int64_t b = 0; b < batch; ++b) {
    owned.push_back(b == 0 ? std::move(first) : owned.front()->Clone());
    sessions.push_back(owned.back().get());
  }
  const std::vector<int32_t> next = Tokens(batch, 3);
  std::vector<double> times;
  for (int i = 0; i < reps + 2; ++i) {
    auto t0 = Clock::now();
    at::Tensor logits = m.Step(sessions, next).value();
    auto t1 = Clock::now();
    if (i >= 2) times.push_back(Seconds(t0, t1));
  }
  return Median(times);
}

// Median time of one Prefill of t tokens onto a session at `context` (a copy of it each
// time).
double TimePrefill(const Model& m, int64_t t, int64_t context, int reps) {
  const std::vector<int32_t> prompt = Tokens(t);
  std::unique_ptr<DecodeState> base = context > 0 ? SessionAt(m, context) : m.NewState();
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) {
    auto st = base->Clone();
    auto t0 = Clock::now();
    at::Tensor logits = m.Prefill(*st, prompt).value();
    auto t1 = Clock::now();
    times.push_back(Seconds(t0, t1));
  }
  return Median(times);
}

bool Wanted(const std::string& list, const std::string& name) {
  if (list.empty()) return true;
  return ("," + list + ",").find("," + name + ",") != std::string::npos;
}

// "8,4,2" -> {8, 4, 2}; empty -> `fallback`.
std::vector<int64_t> Numbers(const std::string& list, std::vector<int64_t> fallback) {
  if (list.empty()) return fallback;
  std::vector<int64_t> out;
  for (size_t at = 0; at <= list.size();) {
    const size_t comma = std::min(list.find(',', at), list.size());
    out.push_back(std::atoll(list.substr(at, comma - at).c_str()));
    at = comma + 1;
  }
  return out;
}

}  // namespace
}  // namespace attnserve::model

int main(int argc, char** argv) {
  using namespace attnserve::model;
  std::string json_path, shapes, modules, workloads, label = "engine", kv_list, batch_list;
  int64_t decode_context = 128;
  int reps_override = 0;
  bool with_reference = false, weights_bf16 = false, state_bf16 = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = value("--json=")) json_path = v;
    else if (const char* v = value("--shapes=")) shapes = v;
    else if (const char* v = value("--modules=")) modules = v;
    else if (const char* v = value("--label=")) label = v;
    else if (const char* v = value("--workloads=")) workloads = v;
    else if (a == "--with_reference") with_reference = true;
    else if (a == "--weights_bf16") weights_bf16 = true;
    else if (a == "--state_bf16") state_bf16 = true;
    else if (const char* v = value("--chunk_size=")) g_chunk_size = std::atoi(v);
    else if (const char* v = value("--kv_heads=")) kv_list = v;
    else if (const char* v = value("--batches=")) batch_list = v;
    else if (const char* v = value("--context=")) decode_context = std::atoll(v);
    else if (const char* v = value("--reps=")) reps_override = std::atoi(v);
    else {
      std::fprintf(stderr,
                   "usage: roofline_bench [--json=FILE] [--shapes=tiny,mid,large] "
                   "[--modules=taylor2,softmax,linear] [--workloads=decode,prefill,context] "
                   "[--label=TEXT] [--with_reference] [--weights_bf16] [--state_bf16]\n"
                   "  [--chunk_size=64]\n"
                   "  [--kv_heads=8,4,2 (KV heads per model; default: the shape's heads)]\n"
                   "  [--batches=1,8,32 (decode sessions)] [--context=128 (decode context)]\n"
                   "  [--reps=N (timed decode steps; default per shape)]\n");
      return 2;
    }
  }
  at::set_num_threads(1);
  const BandwidthCurve curve = MeasureBandwidthCurve();
  const double bandwidth = curve.Dram();
  const double peak = MeasureSgemm();
  std::printf("Machine (one thread): sgemm %.1f GFLOP/s (1024^3 at::mm); STREAM triad",
              peak / 1e9);
  for (const auto& [size, rate] : curve.points) {
    std::printf(" %.0f MiB %.1f GB/s,", size / (1 << 20), rate / 1e9);
  }
  std::printf(" DRAM = the last; load average at start %s\n\n", [] {
                static char buf[64] = "?";
                if (FILE* f = std::fopen("/proc/loadavg", "r")) {
                  if (std::fgets(buf, sizeof buf, f)) buf[strcspn(buf, "\n")] = 0;
                  std::fclose(f);
                }
                return buf;
              }());
  std::printf("| shape | module | workload | state KiB/session | ms/step (median) | tokens/s | "
              "tokens/s/session | MB/step | MFLOP/step | limit ms (DRAM) | %% of limit (DRAM) | "
              "limit ms (footprint BW) | %% of limit (footprint BW) |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<Row> rows;
  auto print = [&](const Row& r) {
    const double limit = std::max(r.bytes / bandwidth, r.flops / peak);
    const double near = std::max(r.bytes / curve.At(r.footprint), r.flops / peak);
    std::printf("| %s | %s | %s | %.0f | %.3f | %.0f | %.1f | %.2f | %.1f | %.3f | %.0f%% | %.3f "
                "| %.0f%% |\n",
                r.shape.c_str(), r.module.c_str(), r.workload.c_str(), r.state_bytes / 1024.0,
                r.seconds * 1e3, double(r.tokens) / r.seconds,
                double(r.tokens) / r.batch / r.seconds, r.bytes / 1e6, r.flops / 1e6,
                limit * 1e3, 100 * limit / r.seconds, near * 1e3, 100 * near / r.seconds);
    std::fflush(stdout);
    rows.push_back(r);
  };
  const std::vector<int64_t> batches = Numbers(batch_list, {1, 8, 32});
  for (Shape s : kShapes) {
    if (!Wanted(shapes, s.name)) continue;
    if (reps_override > 0) s.reps = reps_override;
    for (const Module& module : kModules) {
      if (!Wanted(modules, module.label)) continue;
      for (const int64_t kv : Numbers(kv_list, {0})) {
        // Grouped-query rows are labelled "taylor2 kv4"; without --kv_heads as before.
        const std::string kv_label =
            std::string(module.label) + (kv > 0 ? " kv" + std::to_string(kv) : "");
        const Module mod{kv_label.c_str(), module.name, module.order};
        auto model = MakeModel(s, mod, int(kv));
        const ModelConfig& c = model->config();
        // --with_reference: the same weights with Model::Step's LibTorch path (Run), the
        // reference of the fused step, measured right after it on each decode row.
        std::unique_ptr<Model> reference;
        if (with_reference && model->UsesFusedStep()) {
          setenv("ATTNSERVE_REFERENCE_STEP", "1", 1);
          reference = MakeModel(s, mod, int(kv));
          unsetenv("ATTNSERVE_REFERENCE_STEP");
        }
        // --weights_bf16: the same weights with Model::UseBf16Weights, measured right after
        // each decode row of at most kBf16MaxRows sessions (larger steps stay fp32).
        std::unique_ptr<Model> bf16;
        if (weights_bf16 && model->UsesFusedStep()) {
          bf16 = MakeModel(s, mod, int(kv));
          bf16->UseBf16Weights();
        }
        // --state_bf16: the same weights with bf16 states, measured right after each
        // decode row.
        std::unique_ptr<Model> bf16_states;
        if (state_bf16 && HasFixedState(c.attention)) {
          bf16_states = MakeModel(s, mod, int(kv), /*state_bf16=*/true);
        }
        const std::string ref_label = std::string(mod.label) + " (LibTorch step)";
        const std::string bf16_label = std::string(mod.label) + " (bf16 weights)";
        for (int64_t batch : batches) {
          if (!Wanted(workloads, "decode")) break;
          const int64_t ctx = decode_context;
          Row r{s.name, mod.label,
                "decode B=" + std::to_string(batch) +
                    (ctx != 128 ? " ctx " + std::to_string(ctx) : ""),
                batch, batch};
          r.state_bytes = model->StateBytes(ctx);
          DecodeCost(c, batch, ctx, r);
          r.seconds = TimeDecode(*model, batch, ctx, s.reps);
          print(r);
          const double fp32_seconds = r.seconds;
          if (reference) {
            r.module = ref_label;
            r.seconds = TimeDecode(*reference, batch, ctx, s.reps);
            print(r);
          }
          if (bf16 && batch <= kBf16MaxRows) {
            Row rb{s.name, bf16_label, r.workload, batch, batch};
            rb.state_bytes = r.state_bytes;
            DecodeCost(c, batch, ctx, rb, /*weight_bytes=*/2);
            rb.seconds = TimeDecode(*bf16, batch, ctx, s.reps);
            print(rb);
          }
          if (bf16_states) {
            Row rs{s.name, std::string(mod.label) + " (bf16 states)", r.workload, batch, batch};
            rs.state_bytes = bf16_states->StateBytes(ctx);
            DecodeCost(bf16_states->config(), batch, ctx, rs);
            rs.seconds = TimeDecode(*bf16_states, batch, ctx, s.reps);
            print(rs);
            std::printf("|  |  | state traffic: fp32 %.2f GB/s, bf16 %.2f GB/s against DRAM "
                        "%.2f GB/s (%.0f%% / %.0f%%); tokens/s fp32 %.0f, bf16 %.0f (%.2fx) "
                        "|  |  |  |  |  |  |  |  |  |  |\n",
                        r.state_bytes_moved / fp32_seconds / 1e9,
                        rs.state_bytes_moved / rs.seconds / 1e9, bandwidth / 1e9,
                        100 * r.state_bytes_moved / fp32_seconds / bandwidth,
                        100 * rs.state_bytes_moved / rs.seconds / bandwidth,
                        double(batch) / fp32_seconds, double(batch) / rs.seconds,
                        fp32_seconds / rs.seconds);
            std::fflush(stdout);
          }
        }
        for (int64_t context : {0, 4096}) {
          if (!Wanted(workloads, "prefill")) break;
          const int64_t t = 4096;
          Row r{s.name, mod.label, context == 0 ? "prefill 4k" : "prefill 4k at ctx 4k", 1, t};
          r.state_bytes = model->StateBytes(context + t);
          PrefillCost(c, t, context, r);
          r.seconds = TimePrefill(*model, t, context, std::max(1, s.reps / 10));
          print(r);
          if (reference) {
            r.module = ref_label;
            r.seconds = TimePrefill(*reference, t, context, std::max(1, s.reps / 10));
            print(r);
          }
        }
        for (int64_t context : {4096, 16384}) {
          if (!Wanted(workloads, "context")) break;
          Row r{s.name, mod.label, "decode ctx " + std::to_string(context / 1024) + "k", 1, 1};
          r.state_bytes = model->StateBytes(context);
          DecodeCost(c, 1, context, r);
          r.seconds = TimeDecode(*model, 1, context, s.reps);
          print(r);
          if (reference) {
            r.module = ref_label;
            r.seconds = TimeDecode(*reference, 1, context, s.reps);
            print(r);
          }
        }
      }
    }
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"label\":\"" << label << "\",\"bandwidth\":" << bandwidth << ",\"sgemm\":" << peak
      << ",\"rows\":[";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      f << (i ? "," : "") << "{\"shape\":\"" << r.shape << "\",\"module\":\"" << r.module
        << "\",\"workload\":\"" << r.workload << "\",\"batch\":" << r.batch
        << ",\"seconds\":" << r.seconds << ",\"tokens_per_s\":" << double(r.tokens) / r.seconds
        << ",\"state_bytes\":" << r.state_bytes
        << ",\"bytes\":" << r.bytes << ",\"flops\":" << r.flops
        << ",\"limit_dram\":" << std::max(r.bytes / bandwidth, r.flops / peak)
        << ",\"limit_footprint\":" << std::max(r.bytes / curve.At(r.footprint), r.flops / peak)
        << "}";
    }
    f << "]}\n";
  }
  return 0;
}
