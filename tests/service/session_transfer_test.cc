// The streaming snapshot RPCs at their edges: an export's chunking.
#include "server/service/session_transfer.h"

#include <gtest/gtest.h>

namespace attnserve::service {
namespace {

using Chunks = std::vector<std::pair<size_t, size_t>>;

// Every byte once, in order, in chunks of 1 to kSnapshotChunkBytes; an empty snapshot
// has no chunk (an export of one ends instead of writing empty chunks forever).
TEST(SnapshotChunks, CoverEveryByteOnceAndNeverAreEmpty) {
  constexpr size_t k = kSnapshotChunkBytes;
  EXPECT_EQ(SnapshotChunks(0), Chunks{});
  EXPECT_EQ(SnapshotChunks(1), (Chunks{{0, 1}}));
  EXPECT_EQ(SnapshotChunks(k), (Chunks{{0, k}}));
  EXPECT_EQ(SnapshotChunks(k + 1), (Chunks{{0, k}, {k, 1}}));
  EXPECT_EQ(SnapshotChunks(2 * k), (Chunks{{0, k}, {k, k}}));
}

}  // namespace
}  // namespace attnserve::service
