#include "server/model/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace attnserve::model {

LogSoftmax::LogSoftmax(absl::Span<const float> logits) : logits_(logits) {
  float top = -std::numeric_limits<float>::infinity();
  for (float x : logits) top = std::max(top, x);
  if (std::isnan(top) || top == std::numeric_limits<float>::infinity() ||
      std::any_of(logits.begin(), logits.end(), [](float x) { return std::isnan(x); })) {
    log_normalizer_ = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  // exp in float (every term <= 1 after the shift), summed in double.
  double sum = 0;
  for (float x : logits) sum += std::exp(x - top);
  log_normalizer_ = double(top) + std::log(sum);
}

float LogSoftmax::At(int32_t id) const {
  return float(double(logits_[id]) - log_normalizer_);
}

std::vector<TokenLogprob> LogSoftmax::Top(int n) const {
  const int32_t vocab = int32_t(logits_.size());
  n = std::min(std::max(n, 0), vocab);
  std::vector<TokenLogprob> heap;
  if (n == 0) return heap;
  heap.reserve(n);
  // a before b: higher logprob, then lower id. NaN sorts as -inf so the order stays a
  // strict weak ordering whatever the logits hold.
  auto key = [](float logprob) {
    return std::isnan(logprob) ? -std::numeric_limits<float>::infinity() : logprob;
  };
  auto before = [&](const TokenLogprob& a, const TokenLogprob& b) {
    const float ka = key(a.logprob), kb = key(b.logprob);
    return ka > kb || (ka == kb && a.id < b.id);
  };
  // A heap under `before` keeps its last-ranked entry at the front.
  for (int32_t id = 0; id < vocab; ++id) {
    const TokenLogprob candidate{id, At(id)};
    if (int(heap.size()) < n) {
      heap.push_back(candidate);
      std::push_heap(heap.begin(), heap.end(), before);
    } else if (before(candidate, heap.front())) {
      std::pop_heap(heap.begin(), heap.end(), before);
      heap.back() = candidate;
      std::push_heap(heap.begin(), heap.end(), before);
    }
  }
  std::sort_heap(heap.begin(), heap.end(), before);
  return heap;
}

}  // namespace attnserve::model
