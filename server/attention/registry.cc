#include "server/attention/registry.h"

#include "server/attention/feature_attention.h"
#include "server/attention/kv_attention.h"
#include "server/common/torch_status.h"

namespace attnserve::attention {

absl::StatusOr<std::unique_ptr<Attention>> CreateAttention(const AttentionOptions& options) {
  ModuleKind kind;
  if (absl::Status s = ValidateAttentionOptions(options, &kind); !s.ok()) return s;
  return CatchTorch("creating attention module",
                    [&]() -> std::unique_ptr<Attention> {
    switch (kind) {
      case ModuleKind::kSoftmax:
        return std::make_unique<KvAttention>(options, Normaliser::kSum);
      case ModuleKind::kSoftmaxNorm:
        return std::make_unique<KvAttention>(options, Normaliser::kL2);
      case ModuleKind::kTaylor:
        return std::make_unique<FeatureAttention>(
            options, MakeTaylorFeatureMap(options.head_dim, options.order),
            Normaliser::kSum);
      case ModuleKind::kTaylorNorm:
        return std::make_unique<FeatureAttention>(
            options, MakeTaylorFeatureMap(options.head_dim, options.order),
            Normaliser::kL2);
      case ModuleKind::kLinear:
        return std::make_unique<FeatureAttention>(
            options, MakeEluFeatureMap(options.head_dim), Normaliser::kSum);
    }
    return nullptr;  // unreachable: ValidateAttentionOptions knows every kind
  });
}

}  // namespace attnserve::attention
