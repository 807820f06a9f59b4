#include "server/store/state_pages.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "server/store/record_kind.h"
#include "tests/store/fake_snapshot.h"

namespace attnserve::store {
namespace {

using ::attnserve::store::testing::FakeModel;
using ::attnserve::store::testing::FakeSnapshot;
using ::testing::HasSubstr;

std::vector<std::string_view> Views(const SplitState& split) {
  std::vector<std::string_view> out;
  for (const StatePage& page : split.pages) out.push_back(page.bytes);
  return out;
}

// Split, then join as the same tenant with keys verified: the original bytes, exactly.
void ExpectRoundTrip(const FakeModel& model, int64_t position, int64_t target,
                     int64_t page_tokens) {
  SCOPED_TRACE(::testing::Message() << "dtype " << int(model.dtype) << " version "
                                    << model.version << " position " << position);
  const std::string snapshot = FakeSnapshot(model, position);
  absl::StatusOr<SplitState> split = SplitSnapshot("alice", snapshot, target);
  ASSERT_TRUE(split.ok()) << split.status();
  // At position 0 no tensor has rows to page.
  EXPECT_EQ(split->page_tokens, position == 0 ? 0 : page_tokens);
  ASSERT_EQ(int64_t(split->pages.size()), position / page_tokens);
  for (const StatePage& page : split->pages) {
    EXPECT_EQ(KindOf(page.id), RecordKind::kPage) << page.id;
    EXPECT_EQ(int64_t(page.bytes.size()), page_tokens * model.BytesPerToken());
  }
  // The stub lacks exactly the pages' rows.
  EXPECT_LE(split->stub.size() + split->pages.size() * page_tokens * model.BytesPerToken(),
            snapshot.size() + 64 + 32 * split->pages.size());
  absl::StatusOr<std::vector<std::string>> ids = StubPageIds(split->stub);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), split->pages.size());
  for (size_t i = 0; i < ids->size(); ++i) EXPECT_EQ((*ids)[i], split->pages[i].id);
  absl::StatusOr<std::string> joined = JoinSnapshot(split->stub, Views(*split), "alice");
  ASSERT_TRUE(joined.ok()) << joined.status();
  EXPECT_TRUE(*joined == snapshot);
}

TEST(StatePagesTest, SplitAndJoinGiveBackTheSnapshotByteForByte) {
  // B = 2 layers * 2 tensors * 2 heads * 8 dims * 4 bytes = 256: P = 4096 / 256 = 16.
  for (uint8_t dtype : {1, 2, 3}) {
    for (int fixed : {0, 2}) {
      FakeModel model;
      model.dtype = dtype;
      model.fixed_layers = fixed;
      const int64_t p = dtype == 1 ? 16 : 32;  // 2-byte values: B halves, P doubles
      for (int64_t position : {int64_t{0}, int64_t{1}, p - 1, p, 3 * p, 3 * p + 5}) {
        ExpectRoundTrip(model, position, /*target=*/4096, p);
      }
    }
  }
}

TEST(StatePagesTest, ReadsEveryVersionOfTheSnapshotFormat) {
  for (uint32_t version : {1u, 2u, 3u}) {
    FakeModel model;
    model.version = version;
    model.fixed_layers = 1;
    ExpectRoundTrip(model, 40, 4096, 16);
  }
  FakeModel model;
  model.version = 4;
  absl::StatusOr<SplitState> split = SplitSnapshot("alice", FakeSnapshot(model, 20), 4096);
  EXPECT_TRUE(absl::IsInvalidArgument(split.status())) << split.status();
  EXPECT_THAT(split.status().message(), HasSubstr("version 4"));
  EXPECT_TRUE(absl::IsInvalidArgument(SplitSnapshot("alice", "ATTNSNAQ", 4096).status()));
}

TEST(StatePagesTest, PageSizeFollowsTheBytesPerTokenWithinItsClamp) {
  // Qwen3-0.6B's shape in float32: 28 layers, 8 KV heads, 128 dims, 229,376 bytes per
  // token: 16 tokens (the floor) are already over 2 MiB.
  FakeModel qwen;
  qwen.kv_layers = 28;
  qwen.heads = 8;
  qwen.dim = 128;
  ASSERT_EQ(qwen.BytesPerToken(), 229376);
  absl::StatusOr<SplitState> split = SplitSnapshot("t", FakeSnapshot(qwen, 17));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->page_tokens, 16);
  EXPECT_EQ(split->pages.size(), 1u);
  // 2 KiB per token: 1024 tokens make 2 MiB.
  FakeModel mid;
  mid.heads = 4;
  mid.dim = 32;
  ASSERT_EQ(mid.BytesPerToken(), 2048);
  split = SplitSnapshot("t", FakeSnapshot(mid, 1030));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->page_tokens, 1024);
  EXPECT_EQ(split->pages.size(), 1u);
  // 64 bytes per token: the ceiling, 4096 tokens.
  FakeModel tiny;
  tiny.kv_layers = 1;
  tiny.heads = 1;
  ASSERT_EQ(tiny.BytesPerToken(), 64);
  split = SplitSnapshot("t", FakeSnapshot(tiny, 4100));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_EQ(split->page_tokens, 4096);
  EXPECT_EQ(split->pages.size(), 1u);
  // No KV cache (a recurrent model): no pages, whatever the position.
  FakeModel recurrent;
  recurrent.kv_layers = 0;
  recurrent.fixed_layers = 2;
  split = SplitSnapshot("t", FakeSnapshot(recurrent, 5000));
  ASSERT_TRUE(split.ok()) << split.status();
  EXPECT_TRUE(split->pages.empty());
}

TEST(StatePagesTest, AGrowingStateSharesEveryFullPageOfTheOneBefore) {
  FakeModel model;
  model.fixed_layers = 1;
  std::vector<std::string> before;
  for (int64_t position : {20, 37, 48, 100, 101}) {
    absl::StatusOr<SplitState> split = SplitSnapshot("alice", FakeSnapshot(model, position), 4096);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_GE(split->pages.size(), before.size());
    for (size_t i = 0; i < before.size(); ++i) EXPECT_EQ(split->pages[i].id, before[i]) << i;
    before.clear();
    for (const StatePage& page : split->pages) before.push_back(page.id);
  }
  // Distinct rows, distinct pages.
  for (size_t i = 1; i < before.size(); ++i) EXPECT_NE(before[i], before[i - 1]);
  // Another conversation of the same model shares none.
  model.seed = 2;
  absl::StatusOr<SplitState> other = SplitSnapshot("alice", FakeSnapshot(model, 101), 4096);
  ASSERT_TRUE(other.ok());
  for (const StatePage& page : other->pages) {
    EXPECT_EQ(std::find(before.begin(), before.end(), page.id), before.end());
  }
}

TEST(StatePagesTest, AnotherTenantsPagesNeverVerify) {
  FakeModel model;
  const std::string snapshot = FakeSnapshot(model, 50);
  absl::StatusOr<SplitState> a = SplitSnapshot("alice", snapshot, 4096);
  absl::StatusOr<SplitState> b = SplitSnapshot("bob", snapshot, 4096);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->pages.size(), 3u);
  for (size_t i = 0; i < a->pages.size(); ++i) {
    EXPECT_EQ(a->pages[i].bytes, b->pages[i].bytes);
    EXPECT_NE(a->pages[i].id, b->pages[i].id);  // same rows, another tenant's key
  }
  // To Bob, Alice's state does not exist.
  EXPECT_TRUE(StubIsTenants(a->stub, "alice"));
  EXPECT_FALSE(StubIsTenants(a->stub, "bob"));
  absl::StatusOr<std::string> joined = JoinSnapshot(a->stub, Views(*a), "bob");
  EXPECT_TRUE(absl::IsNotFound(joined.status())) << joined.status();
  // A stub that claims to be Bob's still cannot join Alice's pages: the keys are hers.
  std::string forged = a->stub;
  const std::string bob_tag = TenantTag("bob");
  forged.replace(forged.find(TenantTag("alice")), bob_tag.size(), bob_tag);
  joined = JoinSnapshot(forged, Views(*a), "bob");
  EXPECT_TRUE(absl::IsDataLoss(joined.status())) << joined.status();
  EXPECT_THAT(joined.status().message(), HasSubstr("does not match its key"));
  EXPECT_TRUE(JoinSnapshot(a->stub, Views(*a), "alice").ok());
}

TEST(StatePagesTest, ATamperedOrMisplacedPageIsRefused) {
  FakeModel model;
  const std::string snapshot = FakeSnapshot(model, 50);
  absl::StatusOr<SplitState> split = SplitSnapshot("alice", snapshot, 4096);
  ASSERT_TRUE(split.ok());
  std::vector<std::string> pages;
  for (const StatePage& page : split->pages) pages.push_back(page.bytes);
  auto join = [&](const std::vector<std::string>& given) {
    std::vector<std::string_view> views(given.begin(), given.end());
    return JoinSnapshot(split->stub, views, "alice").status();
  };
  std::vector<std::string> tampered = pages;
  tampered[1][100] ^= 1;
  EXPECT_TRUE(absl::IsDataLoss(join(tampered))) << join(tampered);
  std::vector<std::string> swapped = pages;
  std::swap(swapped[0], swapped[1]);
  EXPECT_TRUE(absl::IsDataLoss(join(swapped)));
  std::vector<std::string> short_page = pages;
  short_page[2].pop_back();
  EXPECT_TRUE(absl::IsDataLoss(join(short_page)));
  EXPECT_TRUE(absl::IsDataLoss(join({pages[0], pages[1]})));
  EXPECT_TRUE(join(pages).ok());
}

TEST(StatePagesTest, ADamagedStubIsDataLossNeverACrash) {
  FakeModel model;
  model.fixed_layers = 1;
  absl::StatusOr<SplitState> split = SplitSnapshot("alice", FakeSnapshot(model, 40), 4096);
  ASSERT_TRUE(split.ok());
  const std::vector<std::string_view> views = Views(*split);
  for (size_t n = 0; n < split->stub.size(); n += 7) {
    absl::StatusOr<std::string> joined =
        JoinSnapshot(std::string_view(split->stub).substr(0, n), views, "alice");
    EXPECT_TRUE(absl::IsDataLoss(joined.status())) << n << ": " << joined.status();
  }
  // Flipped bytes anywhere: refused, or (in values) joined into other bytes, which
  // the snapshot's CRC then refuses; never a crash.
  for (size_t at = 0; at < split->stub.size(); at += 3) {
    std::string stub = split->stub;
    stub[at] ^= 0x5a;
    (void)JoinSnapshot(stub, views, "alice");
  }
}

TEST(StatePagesTest, PagedRecordsKeepTheirWritersHeaderAndTail) {
  const std::string record = EncodePagedRecord("head", "STUB", "tail");
  EXPECT_TRUE(IsPagedRecord(record));
  absl::StatusOr<PagedRecordView> view = ParsePagedRecord(record);
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->prefix, "head");
  EXPECT_EQ(view->stub, "STUB");
  EXPECT_EQ(view->tail, "tail");
  for (size_t n = 8; n < 8 + 16 + 4; ++n) {
    EXPECT_TRUE(absl::IsDataLoss(ParsePagedRecord(record.substr(0, n)).status())) << n;
  }
  EXPECT_FALSE(IsPagedRecord("ATTNSNAP"));
}

}  // namespace
}  // namespace attnserve::store
