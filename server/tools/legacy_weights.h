// The weights format model directories had before safetensors (weights.bin; trainer
// checkpoints were checkpoint.bin), kept for attnserve_convert only: a small checksummed
// file of named fp32 tensors with attnserve's internal names (Model::NamedParameters):
//   "ATSW" | u32 version | u32 count | count x (u32 name_len, name, u32 ndim,
//   i64 dims[ndim], f32 data[prod(dims)]) | u32 crc32 of everything before it.
// Little-endian.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/attention/attention.h"

namespace attnserve::tools {

// Writes `tensors` (converted to contiguous fp32) to `path` via a temporary file and a
// rename, so a crash never leaves a half-written file under `path`.
absl::Status WriteTensors(const std::string& path, const attention::NamedTensors& tensors);

// Reads a file written by WriteTensors. NotFound if missing; DataLoss if truncated,
// malformed or failing its checksum.
absl::StatusOr<attention::NamedTensors> ReadTensors(const std::string& path);

}  // namespace attnserve::tools
