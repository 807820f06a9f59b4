// Picks the next token from a row of logits: temperature, top-k, top-p (nucleus), with
// a seeded per-session RNG; greedy (argmax) at temperature 0. Torch-free.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace attnserve::model {

struct SamplingParams {
  // 0 means greedy; must be >= 0.
  float temperature = 1.0f;
  // Keep the k most likely tokens; 0 means no limit.
  int top_k = 0;
  // Keep the smallest set of most likely tokens whose mass reaches top_p; in (0, 1].
  float top_p = 1.0f;
  // RNG seed; the same seed and logits give the same tokens.
  uint64_t seed = 0;
};

// Every sampling check, once: INVALID_ARGUMENT naming the field (sampling.temperature,
// sampling.top_k, sampling.top_p) for a negative or non-finite temperature, top_k < 0,
// top_p outside (0, 1].
absl::Status ValidateSamplingParams(const SamplingParams& params);

class Sampler {
 public:
  // Rejects what ValidateSamplingParams rejects.
  static absl::StatusOr<std::unique_ptr<Sampler>> Create(const SamplingParams& params);

  // logits: one row of vocab_size values. Returns the chosen id. Not thread-safe: one
  // sampler per session. The token's reported logprob is not the sampler's business:
  // it is the model's own (LogSoftmax in logprobs.h), whatever the parameters here.
  int32_t Sample(absl::Span<const float> logits);

  const SamplingParams& params() const { return params_; }

 private:
  explicit Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}
  double Uniform();  // [0, 1), identical on every platform (std:: distributions are not)

  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<int32_t> order_;  // scratch: candidate ids by descending logit
  std::vector<double> probs_;   // scratch
};

}  // namespace attnserve::model
