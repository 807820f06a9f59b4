#include "server/attention/options.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::attention {
namespace {

struct ModuleEntry {
  const char* name;
  ModuleKind kind;
  bool uses_order;
  bool needs_even_order;  // sum normaliser over a truncated series
};

// The one name -> module table.
constexpr ModuleEntry kModules[] = {
    {"softmax", ModuleKind::kSoftmax, false, false},
    {"softmax_norm", ModuleKind::kSoftmaxNorm, false, false},
    {"taylor", ModuleKind::kTaylor, true, true},
    {"taylor_norm", ModuleKind::kTaylorNorm, true, false},
    {"linear", ModuleKind::kLinear, false, false},
};

constexpr int kMaxOrder = 16;

const ModuleEntry* Find(const std::string& name) {
  for (const auto& e : kModules) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// C(n, k) with saturation at INT64_MAX.
int64_t Binomial(int64_t n, int64_t k) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  __int128 r = 1;
  for (int64_t i = 1; i <= k; ++i) {
    r = r * (n - k + i) / i;  // exact: r * (n-k+i) is divisible by i at every step
    if (r > kMax) return kMax;
  }
  return static_cast<int64_t>(r);
}

// KV head h's decay horizon in tokens: decay_horizon / 2^(num_kv_heads - 1 - h).
double HeadHorizon(const AttentionOptions& o, int h) {
  return std::ldexp(double(o.decay_horizon), -(o.num_kv_heads - 1 - h));
}

int64_t SatMul(int64_t a, int64_t b) {
  __int128 r = static_cast<__int128>(a) * b;
  return r > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max()
                                                 : static_cast<int64_t>(r);
}

}  // namespace

const std::vector<std::string>& ModuleNames() {
  static const auto* names = [] {
    auto* v = new std::vector<std::string>;
    for (const auto& e : kModules) v->push_back(e.name);
    return v;
  }();
  return *names;
}

absl::Status ValidateAttentionOptions(const AttentionOptions& o, ModuleKind* kind) {
  const ModuleEntry* e = Find(o.module);
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.module: unknown module '", o.module,
                     "'; valid modules: ", absl::StrJoin(ModuleNames(), ", ")));
  }
  if (o.num_heads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_heads must be >= 1, got ", o.num_heads));
  }
  if (o.num_kv_heads < 1 || o.num_heads % o.num_kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_kv_heads must be >= 1 and divide num_heads ", o.num_heads, " (each KV head "
        "serves num_heads / num_kv_heads query heads), got ", o.num_kv_heads));
  }
  if (o.head_dim < 2 || o.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "head_dim must be even and >= 2 (RoPE rotates pairs), got ", o.head_dim));
  }
  if (o.value_dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("value_dim must be >= 1, got ", o.value_dim));
  }
  if (o.kv_cache_type == KvCacheType::kQ8_0 &&
      (e->kind == ModuleKind::kSoftmax || e->kind == ModuleKind::kSoftmaxNorm) &&
      (o.head_dim % kQ8_0BlockValues != 0 || o.value_dim % kQ8_0BlockValues != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a q8_0 KV cache stores rows in blocks of 32 values; this model's head dims (",
        o.head_dim, " keys, ", o.value_dim, " values) are not multiples of 32: use "
        "--kv_cache_type=f16"));
  }
  if (o.chunk_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("attention.chunk_size must be >= 1, got ", o.chunk_size));
  }
  if (o.decay_horizon != 0) {
    if (!std::isfinite(o.decay_horizon) || o.decay_horizon < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.decay_horizon must be 0 (no decay) or a positive number of tokens, "
          "got ", o.decay_horizon));
    }
    if (e->kind == ModuleKind::kSoftmax || e->kind == ModuleKind::kSoftmaxNorm) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.decay_horizon is implemented for the fixed-state modules (taylor, "
          "taylor_norm, linear), not for '", o.module, "'"));
    }
    const double shortest = HeadHorizon(o, 0);
    if (shortest < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.decay_horizon ", o.decay_horizon, " gives the first of ",
          o.num_kv_heads, " KV heads a horizon of ", shortest,
          " tokens (each KV head has half the next one's); it must be at least 2, so "
          "decay_horizon must be at least ", std::ldexp(2.0, o.num_kv_heads - 1)));
    }
  }
  if (o.unscaled_query && e->kind != ModuleKind::kLinear) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention.unscaled_query applies to module 'linear' only (its elu feature map "
        "on q as projected); module '", o.module, "' scales q by 1/sqrt(head_dim)"));
  }
  if (o.unscaled_query && o.qk_norm) {
    return absl::InvalidArgumentError(
        "attention.unscaled_query drops the 1/sqrt(head_dim) query scale, which "
        "attention.qk_norm replaces by a temperature: set one or the other");
  }
  if (!o.qk_norm && o.learn_temperature) {
    return absl::InvalidArgumentError(
        "attention.learn_temperature needs attention.qk_norm: without qk_norm the "
        "logit scale is the fixed 1/sqrt(head_dim)");
  }
  if (e->uses_order) {
    if (o.order < 1 || o.order > kMaxOrder) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.order must be in [1, ", kMaxOrder, "] for module '", o.module,
          "', got ", o.order));
    }
    if (e->needs_even_order && o.order % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.order ", o.order, " is odd: module '", o.module,
          "' divides by the sum of kernel values, and an odd Taylor truncation goes "
          "negative, so the denominator can reach zero; use an even order (2, 4, 6, "
          "...) or module 'taylor_norm', which normalises by the output's L2 norm"));
    }
  }
  if (HasFixedState(o)) {
    const int64_t bytes = StateBytesPerLayer(o, 0);
    if (bytes > o.max_state_bytes_per_layer) {
      return absl::InvalidArgumentError(absl::StrCat(
          "attention.order ", o.order, " with head_dim ", o.head_dim, " needs ",
          FeatureCount(o), " features per KV head, ", bytes,
          " bytes of state per session per layer, over the budget of ",
          o.max_state_bytes_per_layer, " bytes; lower the order or the head_dim"));
    }
  }
  if (kind != nullptr) *kind = e->kind;
  return absl::OkStatus();
}

std::vector<float> HeadDecays(const AttentionOptions& o) {
  std::vector<float> decays;
  if (o.decay_horizon == 0) return decays;
  for (int h = 0; h < o.num_kv_heads; ++h) {
    decays.push_back(float(1.0 - 1.0 / HeadHorizon(o, h)));
  }
  return decays;
}

bool HasFixedState(const AttentionOptions& o) {
  const ModuleEntry* e = Find(o.module);
  return e != nullptr && e->kind != ModuleKind::kSoftmax &&
         e->kind != ModuleKind::kSoftmaxNorm;
}

int64_t FeatureCount(const AttentionOptions& o) {
  const ModuleEntry* e = Find(o.module);
  if (e == nullptr) return 0;
  switch (e->kind) {
    case ModuleKind::kTaylor:
    case ModuleKind::kTaylorNorm:
      return Binomial(o.head_dim + o.order, o.order);
    case ModuleKind::kLinear:
      return o.head_dim;
    default:
      return 0;
  }
}

const char* KvCacheTypeName(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF16: return "f16";
    case KvCacheType::kBF16: return "bf16";
    case KvCacheType::kQ8_0: return "q8_0";
    default: return "f32";
  }
}

absl::Status ParseKvCacheType(const std::string& name, KvCacheType* type) {
  for (KvCacheType t :
       {KvCacheType::kF32, KvCacheType::kF16, KvCacheType::kBF16, KvCacheType::kQ8_0}) {
    if (name == KvCacheTypeName(t)) {
      *type = t;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("KV cache type '", name, "' is not one of f32, f16, bf16, q8_0"));
}

int64_t KvRowBytes(KvCacheType type, int64_t n) {
  switch (type) {
    case KvCacheType::kF32: return 4 * n;
    case KvCacheType::kQ8_0: return n / kQ8_0BlockValues * kQ8_0BlockBytes;
    default: return 2 * n;
  }
}

int64_t KvBytesPerToken(const AttentionOptions& o) {
  return (KvRowBytes(o.kv_cache_type, o.head_dim) + KvRowBytes(o.kv_cache_type, o.value_dim)) *
         o.num_kv_heads;
}

int64_t StateElementBytes(const AttentionOptions& o) {
  return HasFixedState(o) && o.state_bf16 ? 2 : 4;
}

int64_t StateBytesPerLayer(const AttentionOptions& o, int64_t context) {
  if (!HasFixedState(o)) return SatMul(KvBytesPerToken(o), context);
  const ModuleEntry* e = Find(o.module);
  // Numerator state m x d_v, plus the m-vector denominator for sum normalisers.
  const int64_t per_feature =
      o.value_dim + (e->kind == ModuleKind::kTaylorNorm ? 0 : 1);
  // One state per KV head: every query head of a group reads the same one.
  return SatMul(SatMul(FeatureCount(o), per_feature), StateElementBytes(o) * o.num_kv_heads);
}

absl::Status CheckServableAs(const AttentionOptions& trained, const std::string& module,
                             int order) {
  const bool same = module == trained.module && (order == 0 || order == trained.order ||
                                                 !Find(module) || !Find(module)->uses_order);
  if (same) return absl::OkStatus();
  std::string compatible = trained.module;
  if (trained.qk_norm && trained.module == "softmax") {
    if (module == "taylor") return absl::OkStatus();
    compatible += ", taylor (any even order)";
  } else if (trained.qk_norm && trained.module == "softmax_norm") {
    if (module == "taylor_norm") return absl::OkStatus();
    compatible += ", taylor_norm (any order)";
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "attention_module: a checkpoint trained with '", trained.module, "'",
      trained.qk_norm ? " and qk_norm" : "", " cannot be served as '", module, "'",
      order ? absl::StrCat(" order ", order) : "", "; compatible: ", compatible,
      trained.qk_norm ? "" : " (only qk_norm softmax checkpoints can switch to taylor)"));
}

int64_t BreakEvenContext(const AttentionOptions& o) {
  if (!HasFixedState(o)) return 0;
  const int64_t fixed = StateBytesPerLayer(o, 0);
  const int64_t per_token = KvBytesPerToken(o);
  return (fixed + per_token - 1) / per_token;
}

}  // namespace attnserve::attention
