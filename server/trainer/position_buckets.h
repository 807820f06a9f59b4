// Mean loss by position along a long context, in buckets such as 0-128, 128-512, 512-1k,
// 1k-4k, 4k-16k bytes: how a model's prediction holds up as its context grows past the
// window it was trained on. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::trainer {

class PositionBuckets {
 public:
  // Buckets [bounds[i], bounds[i+1]); bounds must be >= 0, strictly ascending, at least
  // two of them (InvalidArgument otherwise).
  static absl::StatusOr<PositionBuckets> Create(std::vector<int64_t> bounds);
  // Parses "0,128,512,1024" into bounds and creates the buckets.
  static absl::StatusOr<PositionBuckets> Parse(const std::string& bounds);
  // 0, 128, 512, 1k, 4k, 16k: the table's buckets.
  static std::vector<int64_t> TableBounds();
  // 0, 16, 32, 64, ..., up to `end` (a power of two >= 16): the plot's buckets.
  static std::vector<int64_t> PowerOfTwoBounds(int64_t end);

  // Records the loss of the byte predicted at `position`, the 0-based index of the
  // last byte of context (the prediction has seen position + 1 bytes). Positions outside
  // [bounds.front(), bounds.back()) are not counted.
  void Add(int64_t position, double loss);

  int size() const { return int(bounds_.size()) - 1; }
  int64_t lower(int i) const { return bounds_[i]; }
  int64_t upper(int i) const { return bounds_[i + 1]; }
  int64_t count(int i) const { return counts_[i]; }
  // Mean loss of bucket i; NaN when it holds nothing.
  double mean(int i) const;
  // "512-1k", "1k-4k", "4k-16k": bounds that are multiples of 1024 are written in k.
  std::string Label(int i) const;

 private:
  explicit PositionBuckets(std::vector<int64_t> bounds);
  std::vector<int64_t> bounds_;
  std::vector<int64_t> counts_;
  std::vector<double> sums_;
};

}  // namespace attnserve::trainer
