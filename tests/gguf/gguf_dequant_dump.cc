// gguf_dequant_dump FILE.gguf TENSOR...: each named tensor of FILE, read by the server's
// GGUF reader (server/model/gguf.h) and dequantized row by row by weights::DequantizeRow
// (server/weights/packed_matrix.h), written to stdout as raw little-endian f32, the
// tensors one after another (rows outermost). For dequant_test.py, which compares the
// bytes with ggml_blocks.py's. Exits 1 naming the problem on stderr: a file the reader
// refuses, a tensor not there, a type DequantizeRow does not take.
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "server/model/gguf.h"
#include "server/weights/packed_matrix.h"

namespace {

namespace model = attnserve::model;
namespace weights = attnserve::weights;

bool Dump(const model::GgufTensor& tensor) {
  const std::optional<weights::WeightType> type = weights::FromGgmlType(tensor.type);
  if (!type) {
    std::fprintf(stderr, "gguf_dequant_dump: %s: ggml type %u is not a weights:: type\n",
                 tensor.name.c_str(), tensor.type);
    return false;
  }
  const int64_t in = tensor.dims.empty() ? 1 : tensor.dims[0];
  const int64_t rows = in == 0 ? 0 : tensor.elements() / in;
  if (in % weights::BlockValues(*type) != 0) {
    std::fprintf(stderr, "gguf_dequant_dump: %s: rows of %lld values are not whole %s blocks\n",
                 tensor.name.c_str(), static_cast<long long>(in), weights::WeightTypeName(*type));
    return false;
  }
  const int64_t row_bytes = weights::RowBytes(*type, in);
  if (static_cast<int64_t>(tensor.bytes.size()) < rows * row_bytes) {
    std::fprintf(stderr, "gguf_dequant_dump: %s: %zu bytes for %lld rows of %lld\n",
                 tensor.name.c_str(), tensor.bytes.size(), static_cast<long long>(rows),
                 static_cast<long long>(row_bytes));
    return false;
  }
  std::vector<float> row(in);
  const auto* data = reinterpret_cast<const uint8_t*>(tensor.bytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    weights::DequantizeRow(*type, data + r * row_bytes, row.data(), in);
    if (std::fwrite(row.data(), sizeof(float), in, stdout) != static_cast<size_t>(in)) {
      std::fprintf(stderr, "gguf_dequant_dump: write failed\n");
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: gguf_dequant_dump FILE.gguf TENSOR...\n");
    return 2;
  }
  auto reader = model::GgufReader::Open(argv[1]);
  if (!reader.ok()) {
    std::fprintf(stderr, "gguf_dequant_dump: %s\n", reader.status().ToString().c_str());
    return 1;
  }
  for (int i = 2; i < argc; ++i) {
    const model::GgufTensor* tensor = (*reader)->file().Find(argv[i]);
    if (tensor == nullptr) {
      std::fprintf(stderr, "gguf_dequant_dump: %s has no tensor %s\n", argv[1], argv[i]);
      return 1;
    }
    if (!Dump(*tensor)) return 1;
  }
  return std::fflush(stdout) == 0 ? 0 : 1;
}
