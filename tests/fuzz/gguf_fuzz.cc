// libFuzzer target over the GGUF parser (server/model/gguf.h) and the llama mapping of
// its metadata (gguf_model.h), torch-free. Whatever parses must have every tensor's bytes
// inside the file, every tensor of a type read must convert to elements() values, and a
// config the mapping accepts must have sizes its tensors bear out.
// Seeds: tests/fuzz/corpus/gguf_fuzz/ (small files of each tensor type).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/model/gguf.h"
#include "server/model/gguf_model.h"

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
  auto config = attnserve::model::GgufModelConfig(*file, "fuzz");
  if (config.ok()) {
    const auto* embed = file->Find("token_embd.weight");
    Check(embed != nullptr && embed->dims[0] == config->dim,
          "a config accepted without the embedding it describes");
  }
  return 0;
}
