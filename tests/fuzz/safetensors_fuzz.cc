// libFuzzer target over the safetensors parser (server/model/safetensors.h), torch-free.
// Whatever parses must describe a buffer that its tensors tile exactly, and every F32,
// F16 or BF16 tensor must convert to numel fp32 values. The seed corpus is files the
// writer makes (tests/fuzz/fuzz_seeds.cc) and tests/fuzz/corpus/safetensors_fuzz/.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "server/model/safetensors.h"

namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "safetensors_fuzz: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto file = attnserve::model::ParseSafetensors(bytes);
  if (!file.ok()) return 0;
  const char* end = bytes.data() + bytes.size();
  const char* at = nullptr;
  for (const auto& e : file->tensors) {
    Check(e.bytes.data() >= bytes.data() + 8 && e.bytes.data() + e.bytes.size() <= end,
          "a tensor's bytes lie outside the file");
    Check(at == nullptr || e.bytes.data() == at, "tensors do not tile the buffer");
    at = e.bytes.data() + e.bytes.size();
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= uint64_t(d);
    auto values = attnserve::model::ToFloat32(e);
    if (values.ok()) Check(values->size() == numel, "converted values do not match the shape");
  }
  Check(at == nullptr || at == end, "bytes after the last tensor were accepted");
  return 0;
}
