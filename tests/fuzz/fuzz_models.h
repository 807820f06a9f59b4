// What the fuzz targets and their seed generator share: a catalogue of two tiny models
// (a fixed-state module and a KV-cache one, 64 positions of context so snapshot states
// stay small), the request limits the admission target checks against, and FUZZ_CHECK
// (fuzz_check.h).
#pragma once

#include <memory>

#include <google/protobuf/stubs/logging.h>

#include "server/catalogue/model_catalogue.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::fuzz {

inline constexpr int64_t kMaxContext = 64;
inline constexpr uint64_t kMaxSnapshotBytes = uint64_t{1} << 20;

// Built once per process (the models are read-only afterwards).
inline const catalogue::ModelCatalogue& Catalogue() {
  static const catalogue::ModelCatalogue* catalogue = [] {
    std::vector<std::shared_ptr<const catalogue::ServedModel>> models = {
        test_util::TinyServedModel("taylor", kMaxContext),
        test_util::TinyServedModel("softmax", kMaxContext)};
    return new catalogue::ModelCatalogue(std::move(models));
  }();
  return *catalogue;
}

}  // namespace attnserve::fuzz
