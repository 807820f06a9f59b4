// Nearest-rank percentiles for the benchmark's latency samples.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace attnserve::client {

// The nearest-rank p-th percentile (p in [0, 100]) of `sorted`, which must be
// sorted ascending: the smallest sample such that at least p% of the samples
// are <= it, i.e. sorted[ceil(p/100 * n) - 1], and sorted[0] for p = 0. Every
// result is an observed sample, never an interpolation. NaN for no samples.
inline double NearestRankPercentile(const std::vector<double>& sorted,
                                    double p) {
  if (sorted.empty()) return std::numeric_limits<double>::quiet_NaN();
  const double n = static_cast<double>(sorted.size());
  // p * n / 100 rather than p / 100 * n keeps exact cases exact (95 * 20 / 100
  // == 19); the epsilon absorbs rounding in the remaining ones (99.9 is not
  // representable).
  const double rank = std::ceil(p * n / 100.0 - 1e-9);
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, n)) - 1;
  return sorted[index];
}

// p50, p95 and p99 of a set of samples, taken by value and sorted here.
struct Percentiles {
  double p50 = std::numeric_limits<double>::quiet_NaN();
  double p95 = std::numeric_limits<double>::quiet_NaN();
  double p99 = std::numeric_limits<double>::quiet_NaN();
  double max = std::numeric_limits<double>::quiet_NaN();
  size_t count = 0;
};

inline Percentiles SummarizeSamples(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  Percentiles out;
  out.p50 = NearestRankPercentile(samples, 50);
  out.p95 = NearestRankPercentile(samples, 95);
  out.p99 = NearestRankPercentile(samples, 99);
  out.max = NearestRankPercentile(samples, 100);
  out.count = samples.size();
  return out;
}

}  // namespace attnserve::client
