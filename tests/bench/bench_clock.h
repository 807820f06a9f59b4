// Timing helpers the benchmarks share: wall and thread-CPU clocks in seconds, and the
// median the tables print.
#pragma once

#include <time.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace attnserve::bench {

// Wall time, seconds (steady clock).
inline double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// CPU time of this thread, seconds: on a shared machine wall time also counts the time
// other work held the core; thread CPU time does not (memory contention still shows).
inline double CpuNow() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// The upper median of a non-empty sample.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace attnserve::bench
