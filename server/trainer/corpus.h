// The training text: raw bytes (no vocabulary files), split deterministically into
// training and validation parts. Torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace attnserve::trainer {

struct Corpus {
  std::string train;
  std::string validation;
};

// Reads `path` and splits it: of every `period` consecutive blocks of `block` bytes,
// the last goes to validation (default: 4 KiB blocks, 1 in 20, i.e. 5% spread over the
// whole text). NotFound for a missing file; InvalidArgument for an empty one or one too
// short to give both parts at least `min_bytes`.
absl::StatusOr<Corpus> LoadCorpus(const std::string& path, int64_t min_bytes,
                                  int64_t block = 4096, int period = 20);

}  // namespace attnserve::trainer
