#include "server/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace attnserve::model {

absl::Status ValidateSamplingParams(const SamplingParams& p) {
  if (!(p.temperature >= 0) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sampling.temperature must be a finite number >= 0 (0 is greedy), got ", p.temperature));
  }
  if (p.top_k < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_k must be >= 0 (0 keeps every token), got ", p.top_k));
  }
  if (!(p.top_p > 0 && p.top_p <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("sampling.top_p must be in (0, 1] (0 means 1), got ", p.top_p));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Sampler>> Sampler::Create(const SamplingParams& p) {
  if (absl::Status s = ValidateSamplingParams(p); !s.ok()) return s;
  return std::unique_ptr<Sampler>(new Sampler(p));
}

double Sampler::Uniform() { return double(rng_() >> 11) * 0x1.0p-53; }

int32_t Sampler::Sample(absl::Span<const float> logits) {
  const int32_t n = int32_t(logits.size());
  if (params_.temperature == 0) {
    // First maximum wins ties, so greedy decoding is deterministic.
    return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  order_.resize(n);
  std::iota(order_.begin(), order_.end(), 0);
  const int32_t k = params_.top_k > 0 ? std::min(params_.top_k, n) : n;
  auto by_logit = [&](int32_t a, int32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  };
  if (k < n) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
    order_.resize(k);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  // Softmax over the k candidates at the temperature, largest first.
  const double top = logits[order_[0]];
  probs_.resize(order_.size());
  double total = 0;
  for (size_t i = 0; i < order_.size(); ++i) {
    probs_[i] = std::exp((double(logits[order_[i]]) - top) / params_.temperature);
    total += probs_[i];
  }
  // Nucleus: the shortest prefix whose mass reaches top_p (always at least one token).
  size_t keep = order_.size();
  if (params_.top_p < 1) {
    double mass = 0;
    for (size_t i = 0; i < order_.size(); ++i) {
      mass += probs_[i] / total;
      if (mass >= params_.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = std::accumulate(probs_.begin(), probs_.begin() + keep, 0.0);
  double u = Uniform() * kept;
  size_t chosen = keep - 1;  // guards against rounding at the top end
  for (size_t i = 0; i < keep; ++i) {
    if (u < probs_[i]) {
      chosen = i;
      break;
    }
    u -= probs_[i];
  }
  return order_[chosen];
}

}  // namespace attnserve::model
