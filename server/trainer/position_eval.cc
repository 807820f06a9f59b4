#include "server/trainer/position_eval.h"

#include <ATen/ATen.h>

#include "absl/strings/str_cat.h"
#include "server/common/torch_status.h"

namespace attnserve::trainer {

absl::StatusOr<int> LossByPosition(const model::Model& model, const std::string& text,
                                   const PositionEvalOptions& o,
                                   std::vector<PositionBuckets*> buckets) {
  if (o.length < 1 || o.piece < 1 || o.stretches < 0 || o.stride < 0) {
    return absl::InvalidArgumentError(
        "length and piece must be >= 1, stretches and stride >= 0");
  }
  if (o.length > model.config().max_context) {
    return absl::InvalidArgumentError(absl::StrCat("length ", o.length, " passes max_context ",
                                                   model.config().max_context));
  }
  const int64_t stride = o.stride == 0 ? o.length + 1 : o.stride;
  const int64_t fit = int64_t(text.size()) < o.length + 1
                          ? 0
                          : (int64_t(text.size()) - (o.length + 1)) / stride + 1;
  const int stretches = o.stretches == 0 ? int(fit) : int(std::min<int64_t>(fit, o.stretches));
  if (stretches < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the text has ", text.size(), " bytes, less than one stretch of ", o.length + 1));
  }
  return CatchTorch("loss by position", [&]() -> absl::StatusOr<int> {
    for (int s = 0; s < stretches; ++s) {
      const char* bytes = text.data() + int64_t(s) * stride;
      std::unique_ptr<model::DecodeState> state = model.NewState();
      for (int64_t start = 0; start < o.length; start += o.piece) {
        const int64_t n = std::min(o.piece, o.length - start);
        std::vector<int32_t> ids(n);
        at::Tensor targets = at::empty({n}, at::kLong);
        int64_t* t = targets.data_ptr<int64_t>();
        for (int64_t i = 0; i < n; ++i) {
          ids[i] = static_cast<unsigned char>(bytes[start + i]);
          t[i] = static_cast<unsigned char>(bytes[start + i + 1]);
        }
        auto logits = model.Prefill(*state, ids);  // (n, V): after each appended byte
        if (!logits.ok()) return logits.status();
        at::Tensor loss = at::cross_entropy_loss(*logits, targets, {}, at::Reduction::None);
        const float* l = loss.contiguous().data_ptr<float>();
        for (int64_t i = 0; i < n; ++i) {
          for (PositionBuckets* b : buckets) b->Add(start + i, l[i]);
        }
      }
    }
    return stretches;
  });
}

}  // namespace attnserve::trainer
