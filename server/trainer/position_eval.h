// Loss by position along long contexts: stretches of text fed continuously through a
// model's serving path (Model::Prefill: each module's chunked/recurrent path, or the KV
// cache for softmax), one fresh session per stretch, never reset inside a stretch.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "server/model/model.h"
#include "server/trainer/position_buckets.h"

namespace attnserve::trainer {

struct PositionEvalOptions {
  // Bytes of context per stretch; each stretch is length + 1 bytes of text (the last
  // byte is only a target).
  int64_t length = 16384;
  // Bytes between the starts of consecutive stretches, from the start of the text; 0:
  // length + 1 (consecutive, non-overlapping). A stride under the length makes the
  // stretches overlap: more starts, so the short buckets average over more text.
  int64_t stride = 0;
  // Stretches to evaluate; 0: as many as fit.
  int stretches = 0;
  // Bytes appended per Prefill call (the state carries everything between calls).
  int64_t piece = 2048;
};

// Adds the next-byte cross-entropy (nats) of every position of every stretch of `text`
// to each of `buckets`. Returns the number of stretches evaluated. Errors:
// InvalidArgument when `text` holds no whole stretch or the length passes the model's
// max_context; Internal when LibTorch fails.
absl::StatusOr<int> LossByPosition(const model::Model& model, const std::string& text,
                                   const PositionEvalOptions& options,
                                   std::vector<PositionBuckets*> buckets);

}  // namespace attnserve::trainer
