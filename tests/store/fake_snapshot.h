// Session snapshots built byte by byte in the layout of proto/attnserve/v1/SNAPSHOT.md
// (versions 1 to 3), without a model: for the store's page tests, which must not link
// the snapshot codec. The KV rows of a position are the same in every state that holds
// it (a KV cache only grows), the fixed states change with the position, as a real
// session's do.
#pragma once

#include <cstdint>
#include <string>

namespace attnserve::store::testing {

struct FakeModel {
  int kv_layers = 2;     // layers with "k" (heads, position, dim) and "v" (the same)
  int fixed_layers = 0;  // layers with "conv" (heads * dim, 3) and "ssm" (1, heads, dim, dim)
  int64_t heads = 2;
  int64_t dim = 8;
  uint8_t dtype = 1;     // 1 float32, 2 float16, 3 bfloat16
  uint32_t version = 3;  // 1 and 2 hold only float32
  uint64_t seed = 1;     // another seed, other values (another conversation)

  // Bytes per token over the KV caches (B in state_pages.h).
  int64_t BytesPerToken() const;
};

// The snapshot of `model` at `position`, CRC-32C and all.
std::string FakeSnapshot(const FakeModel& model, int64_t position);

}  // namespace attnserve::store::testing
