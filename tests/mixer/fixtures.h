// The arrays make_mixer_fixtures.py writes from the numpy reference, read from the file
// MIXER_FIXTURES names (ctest runs the script first, as the mixer_fixtures test, and sets
// the variable), and a comparison that reports the worst element.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace attnserve::mixer::testing {

// The array `name` ("CASE.NAME" as the script writes it). Records a test failure and
// returns an empty vector when the file or the array is missing.
std::vector<float> Fixture(const std::string& name);

// max over i of |got[i] - want[i]| / (1 + |want[i]|) for n elements; infinity if
// either side has a NaN.
double MaxRelDiff(const float* got, const float* want, int64_t n);

}  // namespace attnserve::mixer::testing
