#include "tests/mixer/fixtures.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>

namespace attnserve::mixer::testing {

namespace {

const std::map<std::string, std::vector<float>>& All() {
  static const auto* all = [] {
    auto* arrays = new std::map<std::string, std::vector<float>>;
    const char* path = std::getenv("MIXER_FIXTURES");
    if (path == nullptr) return arrays;
    std::ifstream in(path);
    std::string name;
    int64_t count;
    while (in >> name >> count) {
      std::vector<float>& v = (*arrays)[name];
      v.resize(count);
      for (float& e : v) in >> e;
    }
    return arrays;
  }();
  return *all;
}

}  // namespace

std::vector<float> Fixture(const std::string& name) {
  if (std::getenv("MIXER_FIXTURES") == nullptr) {
    ADD_FAILURE() << "MIXER_FIXTURES is not set: run through ctest, or run "
                     "tests/mixer/make_mixer_fixtures.py FILE and set MIXER_FIXTURES=FILE";
    return {};
  }
  auto it = All().find(name);
  if (it == All().end()) {
    ADD_FAILURE() << "no array " << name << " in " << std::getenv("MIXER_FIXTURES");
    return {};
  }
  return it->second;
}

double MaxRelDiff(const float* got, const float* want, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::abs(double(got[i]) - want[i]) / (1.0 + std::abs(want[i]));
    if (std::isnan(d)) return INFINITY;  // a NaN anywhere fails any tolerance
    worst = std::max(worst, d);
  }
  return worst;
}

}  // namespace attnserve::mixer::testing
