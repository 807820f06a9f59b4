// libFuzzer target over the GGUF parser (server/model/gguf.h), torch-free. Whatever
// parses must have every tensor's bytes inside the file, of the size its type and
// dimensions give, and every tensor of a type read must convert to elements() values.
// Seeds: tests/fuzz/corpus/gguf_fuzz/ (small files of each tensor type).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/model/gguf.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = attnserve::model::ParseGguf(bytes);
  if (!file.ok()) return 0;
  for (const auto& t : file->tensors) {
    Check(t.bytes.data() >= bytes.data() && t.bytes.data() + t.bytes.size() <= bytes.data() + size,
          "a tensor's bytes lie outside the file");
    auto values = attnserve::model::GgufToFloat32(t);
    if (values.ok()) Check(int64_t(values->size()) == t.elements(), "values do not match the dims");
  }
  return 0;
}
