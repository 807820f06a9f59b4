// safetensors (Hugging Face's weight files), read and written without LibTorch:
//   u64 little-endian header length N | N bytes of JSON header | buffer
// The header is a JSON object {name: {"dtype", "shape", "data_offsets": [begin, end)}}
// with offsets relative to the buffer, plus an optional "__metadata__" object of strings.
// Validated as the reference reader does: N <= 100 MB, a JSON object, offsets contiguous
// from 0 in buffer order, end - begin = numel * dtype size, nothing after the last tensor,
// no name twice. F32, F16 and BF16 convert to fp32; other dtypes are laid out and checked
// but refused when a caller asks for their values.
//
// A directory holds model.safetensors, or model.safetensors.index.json whose "weight_map"
// names each tensor's shard.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace attnserve::model {

inline constexpr char kSafetensorsFile[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFile[] = "model.safetensors.index.json";
// Largest header the reader accepts (the reference reader's bound).
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;

// One tensor of a parsed file: a view into bytes its reader owns.
struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // as stored: "F32", "BF16", ...
  std::vector<int64_t> shape;
  std::string_view bytes;  // end - begin bytes of the buffer
};

// A parsed file: its tensors in buffer order and its metadata.
struct SafetensorsFile {
  std::vector<SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates a whole file's bytes; the entries view `bytes`, which must outlive
// them. DataLoss naming the rule and, where there is one, the tensor.
absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes);

// An entry's values as fp32 (F32 as stored; F16 and BF16 widened exactly).
// InvalidArgument naming the tensor for another dtype.
absl::StatusOr<std::vector<float>> ToFloat32(const SafetensorsEntry& entry);

// Every tensor of a model directory's safetensors files, mapped read-only. Immutable once
// opened; the entries stay valid as long as the reader.
class SafetensorsReader {
 public:
  // One file. NotFound if missing; DataLoss (naming the path) if invalid.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> OpenFile(const std::string& path);
  // `dir`/model.safetensors, else the shards `dir`/model.safetensors.index.json names.
  // The index's weight_map and the shards must agree exactly (each tensor in the shard
  // the map names, no tensor in a shard the map does not name it for); shard names are
  // plain file names in `dir`.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> OpenDir(const std::string& dir);

  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  // Every tensor, file by file in buffer order.
  const std::vector<SafetensorsEntry>& tensors() const { return tensors_; }
  // The tensor named `name`, or null.
  const SafetensorsEntry* Find(std::string_view name) const;

 private:
  SafetensorsReader() = default;
  // Maps `path` and appends its tensors (names must be new).
  absl::Status Add(const std::string& path);

  struct Mapping {
    void* data;
    size_t size;
  };
  std::vector<Mapping> mappings_;
  std::vector<SafetensorsEntry> tensors_;
  std::map<std::string, size_t, std::less<>> by_name_;
};

// Storage dtype for the writer.
enum class SafetensorsDtype { kF32, kF16, kBF16 };

// A tensor to write: fp32 values (row-major, numel of `shape`) that outlive the call.
struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  const float* values;
};

// The file's bytes: tensors in the given order, converted to `dtype` (round to nearest
// even; F16 overflows to inf), the header padded with spaces to a multiple of 8 bytes as
// the reference writer does. Names must be distinct.
std::string SerializeSafetensors(absl::Span<const SafetensorsTensor> tensors,
                                 SafetensorsDtype dtype,
                                 const std::map<std::string, std::string>& metadata = {});

// SerializeSafetensors to `path` through a temporary file and a rename, so a crash never
// leaves a half-written file under `path`.
absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsTensor> tensors,
                              SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata = {});

// fp16 / bf16 bit patterns <-> fp32 (exposed for tests).
float HalfToFloat(uint16_t h);
float Bf16ToFloat(uint16_t b);
uint16_t FloatToHalf(float f);
uint16_t FloatToBf16(float f);

}  // namespace attnserve::model
