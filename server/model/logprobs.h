// What `logprobs` and `top_logprobs` report: the model's own log-softmax of one row of
// raw logits, before temperature, top-k, top-p or any mask the sampler applies (the
// OpenAI and vLLM convention), so a greedy token reports log p_max, not 0. Torch-free.
//
// Cost: constructing a LogSoftmax is one pass of exp over the vocabulary, Top one more
// pass of selection; the scheduler does either only for turns that ask.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace attnserve::model {

// One token and its log-probability.
struct TokenLogprob {
  int32_t id = 0;
  float logprob = 0;
  friend bool operator==(const TokenLogprob& a, const TokenLogprob& b) {
    return a.id == b.id && a.logprob == b.logprob;
  }
};

// log_softmax(logits), normalised once: log_normalizer() = log sum_i exp(logits[i]),
// with the maximum shifted out and the sum in double, so a vocabulary of 128k float
// logits loses no more than float rounding. At(id) = logits[id] - log_normalizer().
// Holds the span: `logits` must outlive it and not change. Meant for finite logits;
// a NaN or +inf among them makes every logprob NaN.
//
//   const LogSoftmax log_softmax(row);  // row: the model's logits for one position
//   float chosen = log_softmax.At(id);
//   std::vector<TokenLogprob> top = log_softmax.Top(5);
class LogSoftmax {
 public:
  explicit LogSoftmax(absl::Span<const float> logits);

  // log p(id); id must be in [0, logits.size()).
  float At(int32_t id) const;

  // The min(n, logits.size()) most likely tokens, by logprob descending and, among
  // equal logprobs, lower id first; empty for n <= 0. Every id of the row competes,
  // special tokens included. A bounded heap of n entries over the row (partial
  // selection: O(V log n), nothing of size V allocated).
  std::vector<TokenLogprob> Top(int n) const;

  double log_normalizer() const { return log_normalizer_; }

 private:
  absl::Span<const float> logits_;
  double log_normalizer_;
};

}  // namespace attnserve::model
