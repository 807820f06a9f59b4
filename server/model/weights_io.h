// A small checksummed file of named fp32 tensors (the model's weights.bin):
//   "ATSW" | u32 version | u32 count | count x (u32 name_len, name, u32 ndim,
//   i64 dims[ndim], f32 data[prod(dims)]) | u32 crc32 of everything before it.
// Little-endian. Chosen over LibTorch pickles so reading needs no LibTorch serializer
// headers and a corrupt or truncated file is detected before any weight is used.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "server/attention/attention.h"

namespace attnserve::model {

// Writes `tensors` (converted to contiguous fp32) to `path` via a temporary file and a
// rename, so a crash never leaves a half-written file under `path`.
absl::Status WriteTensors(const std::string& path, const attention::NamedTensors& tensors);

// Reads a file written by WriteTensors. NotFound if missing; DataLoss if truncated,
// malformed or failing its checksum.
absl::StatusOr<attention::NamedTensors> ReadTensors(const std::string& path);

}  // namespace attnserve::model
