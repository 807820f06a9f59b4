#include "server/trainer/position_buckets.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace attnserve::trainer {
namespace {

std::string Bytes(int64_t n) {
  return n > 0 && n % 1024 == 0 ? absl::StrCat(n / 1024, "k") : absl::StrCat(n);
}

}  // namespace

PositionBuckets::PositionBuckets(std::vector<int64_t> bounds)
    : bounds_(std::move(bounds)),
      counts_(bounds_.size() - 1, 0),
      sums_(bounds_.size() - 1, 0.0) {}

absl::StatusOr<PositionBuckets> PositionBuckets::Create(std::vector<int64_t> bounds) {
  if (bounds.size() < 2) {
    return absl::InvalidArgumentError("position buckets need at least two bounds");
  }
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (bounds[i] < 0 || (i > 0 && bounds[i] <= bounds[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("position bucket bounds must be >= 0 and strictly ascending; bound ",
                       i, " is ", bounds[i]));
    }
  }
  return PositionBuckets(std::move(bounds));
}

absl::StatusOr<PositionBuckets> PositionBuckets::Parse(const std::string& text) {
  std::vector<int64_t> bounds;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    int64_t b;
    if (!absl::SimpleAtoi(part, &b)) {
      return absl::InvalidArgumentError(
          absl::StrCat("position bucket bound '", part, "' is not an integer"));
    }
    bounds.push_back(b);
  }
  return Create(std::move(bounds));
}

std::vector<int64_t> PositionBuckets::TableBounds() {
  return {0, 128, 512, 1024, 4096, 16384};
}

std::vector<int64_t> PositionBuckets::PowerOfTwoBounds(int64_t end) {
  std::vector<int64_t> bounds = {0};
  for (int64_t b = 16; b <= end; b *= 2) bounds.push_back(b);
  return bounds;
}

void PositionBuckets::Add(int64_t position, double loss) {
  // The bucket is the last bound <= position.
  auto it = std::upper_bound(bounds_.begin(), bounds_.end(), position);
  if (it == bounds_.begin() || it == bounds_.end()) return;
  const size_t i = size_t(it - bounds_.begin()) - 1;
  counts_[i] += 1;
  sums_[i] += loss;
}

double PositionBuckets::mean(int i) const {
  return counts_[i] == 0 ? std::numeric_limits<double>::quiet_NaN() : sums_[i] / counts_[i];
}

std::string PositionBuckets::Label(int i) const {
  return absl::StrCat(Bytes(lower(i)), "-", Bytes(upper(i)));
}

}  // namespace attnserve::trainer
