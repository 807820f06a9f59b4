#include "tests/store/fake_snapshot.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "server/common/crc32c.h"

namespace attnserve::store::testing {
namespace {

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int64_t ElementBytes(uint8_t dtype) { return dtype == 1 ? 4 : 2; }

// Appends `n` bytes that depend only on `tag`.
void AppendValues(std::string& out, uint64_t tag, int64_t n) {
  uint64_t state = Mix(tag);
  for (int64_t i = 0; i < n; i += 8) {
    state = Mix(state);
    char word[8];
    std::memcpy(word, &state, 8);
    out.append(word, size_t(std::min<int64_t>(8, n - i)));
  }
}

void TensorHeader(std::string& out, const std::string& name, uint8_t dtype,
                  const std::vector<int64_t>& dims) {
  Put<uint8_t>(out, uint8_t(name.size()));
  out += name;
  Put<uint8_t>(out, dtype);
  Put<uint8_t>(out, uint8_t(dims.size()));
  Put<uint8_t>(out, 0);
  for (int64_t d : dims) Put<int64_t>(out, d);
}

}  // namespace

int64_t FakeModel::BytesPerToken() const {
  return int64_t(kv_layers) * 2 * heads * dim * ElementBytes(dtype);
}

std::string FakeSnapshot(const FakeModel& model, int64_t position) {
  const std::string name = "fake", module = "kv", owner = "default";
  std::string out = "ATTNSNAP";
  Put<uint32_t>(out, model.version);
  Put<uint32_t>(out, 0);  // header_bytes, set below
  Put<uint64_t>(out, 0);  // total_bytes, set below
  for (int i = 0; i < 32; ++i) out.push_back(char(Mix(model.seed * 977 + i) & 0xff));
  Put<int64_t>(out, position);
  Put<int32_t>(out, position > 0 ? 7 : -1);
  Put<uint32_t>(out, uint32_t(model.kv_layers + model.fixed_layers));
  Put<int64_t>(out, 3600000);
  Put<uint16_t>(out, uint16_t(name.size()));
  Put<uint16_t>(out, uint16_t(module.size()));
  Put<uint32_t>(out, 1);
  Put<uint32_t>(out, 0);
  Put<uint32_t>(out, model.version == 1 ? 0 : uint32_t(owner.size()));
  out += name;
  out += module;
  if (model.version != 1) out += owner;
  const uint32_t header_bytes = uint32_t(out.size());
  std::memcpy(out.data() + 12, &header_bytes, 4);
  const int64_t el = ElementBytes(model.dtype);
  const int64_t row = model.dim * el;
  int layer = 0;
  for (int l = 0; l < model.kv_layers; ++l, ++layer) {
    Put<uint32_t>(out, 2);
    int tensor = 0;
    for (const char* t : {"k", "v"}) {
      TensorHeader(out, t, model.dtype, {model.heads, position, model.dim});
      for (int64_t h = 0; h < model.heads; ++h) {
        for (int64_t p = 0; p < position; ++p) {
          const uint64_t tag = ((model.seed * 131 + layer) * 7 + tensor) * 1000003 +
                               uint64_t(h) * 1000000007ull + uint64_t(p);
          AppendValues(out, tag, row);
        }
      }
      ++tensor;
    }
  }
  for (int l = 0; l < model.fixed_layers; ++l, ++layer) {
    Put<uint32_t>(out, 2);
    const uint64_t tag = (model.seed * 131 + layer) * 7919 + uint64_t(position) * 65537;
    TensorHeader(out, "conv", model.dtype, {model.heads * model.dim, 3});
    AppendValues(out, tag, model.heads * model.dim * 3 * el);
    TensorHeader(out, "ssm", model.dtype, {1, model.heads, model.dim, model.dim});
    AppendValues(out, tag + 1, model.heads * model.dim * model.dim * el);
  }
  const uint64_t total = out.size() + 4;
  std::memcpy(out.data() + 16, &total, 8);
  Put<uint32_t>(out, Crc32c(0, out.data(), out.size()));
  return out;
}

}  // namespace attnserve::store::testing
