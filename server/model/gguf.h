// GGUF (llama.cpp's single-file models), read without LibTorch: version 3 (and 2, the
// same layout):
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count x { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] (innermost first) |
//                    u32 ggml_type | u64 offset (from the data section, aligned) }
//   padding to general.alignment (default 32) | the data section
// Strings are u64 length + bytes; arrays are u32 element type + u64 count + elements;
// everything little-endian. Every count, length, dimension and offset is checked against
// the bytes actually there before anything is allocated for it: a malformed file is
// DATA_LOSS naming what is wrong, never a crash (tests/fuzz/gguf_fuzz.cc).
//
// Tensor types read (server/weights/packed_matrix.h): F32, F16, BF16, Q8_0, Q4_0, Q4_K,
// Q5_K and Q6_K; the other types above are laid out and checked but refused when a caller
// asks for values, and a type not listed makes the file invalid.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/weights/packed_matrix.h"

namespace attnserve::model {

inline constexpr char kGgufSuffix[] = ".gguf";

// ggml_type values this reader knows the layout of.
enum class GgmlType : uint32_t {
  kF32 = 0, kF16 = 1, kQ4_0 = 2, kQ4_1 = 3, kQ5_0 = 6, kQ5_1 = 7, kQ8_0 = 8, kQ8_1 = 9,
  kQ2_K = 10, kQ3_K = 11, kQ4_K = 12, kQ5_K = 13, kQ6_K = 14, kQ8_K = 15, kBF16 = 30,
};
// "F32", "Q8_0", ...; "type N" for others.
std::string GgmlTypeName(uint32_t type);

struct GgufTensor {
  std::string name;
  std::vector<int64_t> dims;  // innermost first, as stored
  uint32_t type = 0;
  std::string_view bytes;     // its data, a view into the file
  int64_t elements() const;
  // The shape outermost first ([rows, columns] for a matrix), as PyTorch writes it.
  std::vector<int64_t> shape() const;
};

struct GgufFile {
  uint32_t version = 0;
  uint64_t alignment = 32;
  // Metadata values as JSON: integers, floats, bools, strings, arrays of them.
  nlohmann::json metadata = nlohmann::json::object();
  std::vector<GgufTensor> tensors;
  std::map<std::string, size_t> by_name;

  const GgufTensor* Find(const std::string& name) const;
};

// Parses and validates a whole file's bytes; the tensors view `bytes`, which must
// outlive them. DATA_LOSS naming the rule broken and where.
absl::StatusOr<GgufFile> ParseGguf(std::string_view bytes);

// A metadata value as text for a message: JSON, invalid UTF-8 in strings replaced (a file's
// strings are bytes; dumping them raw would throw), cut to 80 characters.
std::string GgufValueText(const nlohmann::json& value);

// A tensor's values as fp32. INVALID_ARGUMENT naming the tensor for a type not read.
absl::StatusOr<std::vector<float>> GgufToFloat32(const GgufTensor& tensor);

// The weights:: type of a tensor (types read, above). INVALID_ARGUMENT naming the tensor
// and its type for the others.
absl::StatusOr<weights::WeightType> GgufWeightType(const GgufTensor& tensor);

// A GGUF file mapped read-only; immutable once opened.
class GgufReader {
 public:
  // NOT_FOUND if missing; DATA_LOSS naming the path if invalid.
  static absl::StatusOr<std::unique_ptr<GgufReader>> Open(const std::string& path);
  ~GgufReader();
  GgufReader(const GgufReader&) = delete;
  GgufReader& operator=(const GgufReader&) = delete;

  const GgufFile& file() const { return file_; }
  const std::string& path() const { return path_; }

  // Drops the file's pages that lie wholly inside `bytes` (a view into this file, e.g. a
  // tensor's) from memory: a loader that has copied a tensor releases it, so a model's
  // peak memory is its copies, not its copies and the file. Later reads fault the pages
  // back in from the file.
  void Release(std::string_view bytes) const;

 private:
  GgufReader() = default;
  std::string path_;
  void* data_ = nullptr;
  size_t size_ = 0;
  GgufFile file_;
};

}  // namespace attnserve::model
