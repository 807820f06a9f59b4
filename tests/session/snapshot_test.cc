#include "server/snapshot/snapshot.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstring>

#include "server/common/crc32c.h"
#include "tests/testing/tiny_model.h"

namespace attnserve::session {
namespace {

using catalogue::ModelCatalogue;
using catalogue::ServedModel;
using namespace snapshot;  // the codec under test and its types

constexpr uint64_t kMaxBytes = uint64_t{1} << 30;
const char* const kModules[] = {"softmax", "softmax_norm", "taylor", "taylor_norm", "linear"};

// TinyServedModel with grouped-query attention: 4 query heads of 16 on 2 KV heads
// (named tiny-gqa-MODULE).
std::shared_ptr<const ServedModel> TinyGqaModel(const std::string& module) {
  model::ModelConfig c = test_util::TinyServedModel(module, 4096)->model->config();
  c.name = "tiny-gqa-" + module;
  c.attention.num_heads = 4;
  c.attention.num_kv_heads = 2;
  auto m = model::Model::Create(c, 3);
  EXPECT_TRUE(m.ok()) << m.status();
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") == std::string::npos) t.mul_(20);
  }
  return std::make_shared<ServedModel>(ServedModel{c.name, "", std::move(m).value(), {},
                                                   std::make_shared<tokenizer::ByteTokenizer>()});
}

class SnapshotTest : public testing::Test {
 protected:
  SnapshotTest() {
    std::vector<std::shared_ptr<const ServedModel>> models;
    for (const char* m : kModules) models.push_back(test_util::TinyServedModel(m, 4096));
    for (const char* m : kModules) models.push_back(TinyGqaModel(m));
    catalogue_ = std::make_unique<ModelCatalogue>(models);
  }
  std::shared_ptr<const ServedModel> Model(const std::string& module) const {
    return catalogue_->Find("tiny-" + module).value();
  }
  // A state of `model` after prefilling `n` tokens.
  static std::unique_ptr<model::DecodeState> StateAfter(const ServedModel& m, int n) {
    auto state = m.model->NewState();
    std::vector<int32_t> tokens;
    for (int i = 0; i < n; ++i) tokens.push_back(32 + (i * 7) % 90);
    EXPECT_TRUE(m.model->Prefill(*state, tokens).ok());
    return state;
  }
  static std::shared_ptr<const std::string> Encode(const ServedModel& m,
                                                   const model::DecodeState& state,
                                                   std::optional<int32_t> pending = 65) {
    SnapshotInfo info;
    info.pending_token = pending;
    info.ttl = absl::Minutes(7);
    return std::make_shared<const std::string>(EncodeSnapshot(m, &state, info));
  }
  absl::StatusOr<VerifiedSnapshot> Verify(std::string bytes, uint64_t max = kMaxBytes) {
    return VerifySnapshot(std::make_shared<const std::string>(std::move(bytes)), *catalogue_,
                          max);
  }
  // Rewrites the trailing CRC so a deliberately edited snapshot passes the checksum.
  static void Reseal(std::string& bytes) {
    const uint32_t crc = Crc32c(0, bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  }

  std::unique_ptr<ModelCatalogue> catalogue_;
};

TEST_F(SnapshotTest, RestoredStateContinuesBitIdenticallyForEveryModule) {
  std::vector<std::string> names(std::begin(kModules), std::end(kModules));
  for (const char* module : kModules) names.push_back(std::string("gqa-") + module);
  for (const std::string& module : names) {
    SCOPED_TRACE(module);
    auto m = Model(module);
    auto original = StateAfter(*m, 37);
    auto verified = Verify(*Encode(*m, *original));
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->model, m);
    EXPECT_EQ(verified->info.position, 37);
    EXPECT_EQ(verified->info.pending_token, 65);
    EXPECT_EQ(verified->info.ttl, absl::Minutes(7));
    auto restored = RestoreSnapshotState(*verified);
    ASSERT_TRUE(restored.ok()) << restored.status();
    ASSERT_EQ((*restored)->position(), 37);
    // Both continue with the same prefill and steps: every logit bit-identical.
    for (int step = 0; step < 5; ++step) {
      std::vector<model::DecodeState*> a = {original.get()}, b = {restored->get()};
      at::Tensor la = m.get()->model->Step(a, {int32_t(70 + step)}).value();
      at::Tensor lb = m.get()->model->Step(b, {int32_t(70 + step)}).value();
      ASSERT_TRUE(at::equal(la, lb)) << "step " << step;
    }
    at::Tensor pa = m->model->Prefill(*original, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).value();
    at::Tensor pb = m->model->Prefill(**restored, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}).value();
    EXPECT_TRUE(at::equal(pa, pb));
  }
}

TEST_F(SnapshotTest, OverheadIsUnderOneKibAndKvCachesWriteOnlyTheirUsedLength) {
  for (const char* module : kModules) {
    SCOPED_TRACE(module);
    auto m = Model(module);
    auto state = StateAfter(*m, 21);  // KV capacity grows past 21 (doubling)
    auto bytes = Encode(*m, *state);
    auto verified = Verify(*bytes);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->state_bytes, m->model->StateBytes(21));
    EXPECT_LE(int64_t(bytes->size()) - verified->state_bytes, 1024);
  }
}

TEST_F(SnapshotTest, ASnapshotAtTheTailOfARecordVerifiesAndRestoresInPlace) {
  // A stored record (a kept chat state, a stored response) carries the snapshot after
  // its own header: verified and restored from there, not copied out first. An odd
  // header length leaves every payload unaligned.
  auto m = Model("softmax");
  auto original = StateAfter(*m, 19);
  auto whole = Encode(*m, *original);
  auto record = std::make_shared<const std::string>("record header" + *whole);
  const SnapshotBytes tail(record, 13);
  EXPECT_EQ(tail.view(), *whole);
  auto verified = VerifySnapshot(tail, *catalogue_, kMaxBytes);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->bytes.view().data(), record->data() + 13);
  EXPECT_EQ(*verified->bytes.Whole(), *whole);  // a string of its own when exported
  auto restored = RestoreSnapshotState(*verified);
  ASSERT_TRUE(restored.ok()) << restored.status();
  at::Tensor pa = m->model->Prefill(*original, {1, 2, 3, 4, 5}).value();
  at::Tensor pb = m->model->Prefill(**restored, {1, 2, 3, 4, 5}).value();
  EXPECT_TRUE(at::equal(pa, pb));
  // The header is not part of the snapshot: the whole record does not verify.
  EXPECT_FALSE(VerifySnapshot(record, *catalogue_, kMaxBytes).ok());
}

TEST_F(SnapshotTest, SameSessionGivesTheSameBytes) {
  auto m = Model("taylor");
  auto a = StateAfter(*m, 12), b = StateAfter(*m, 12);
  EXPECT_EQ(*Encode(*m, *a), *Encode(*m, *b));
  EXPECT_EQ(*Encode(*m, *a), *Encode(*m, *a->Clone()));
}

TEST_F(SnapshotTest, RefusesEveryTruncation) {
  auto m = Model("softmax");
  const std::string whole = *Encode(*m, *StateAfter(*m, 3));
  for (size_t n = 0; n < whole.size(); ++n) {
    auto v = Verify(whole.substr(0, n));
    ASSERT_FALSE(v.ok()) << "accepted a snapshot truncated to " << n << " bytes";
    if (n < 8) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument) << n;
    } else {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss) << n;
      EXPECT_NE(v.status().message().find("truncated"), std::string::npos) << v.status();
    }
  }
  auto trailing = Verify(whole + "x");
  EXPECT_EQ(trailing.status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SnapshotTest, RefusesEverySingleFlippedByte) {
  auto m = Model("softmax");
  const std::string whole = *Encode(*m, *StateAfter(*m, 2));
  for (size_t i = 0; i < whole.size(); ++i) {
    std::string bad = whole;
    bad[i] ^= 0x10;
    auto v = Verify(bad);
    ASSERT_FALSE(v.ok()) << "accepted a flip at byte " << i;
    const absl::StatusCode code = v.status().code();
    EXPECT_TRUE(code == absl::StatusCode::kDataLoss || code == absl::StatusCode::kInvalidArgument)
        << i << ": " << v.status();
    if (i >= 24) {  // past magic, version, header and total sizes: the checksum says it
      EXPECT_NE(v.status().message().find("checksum"), std::string::npos) << v.status();
    }
  }
}

TEST_F(SnapshotTest, RefusesAnotherModelsSnapshot) {
  auto other = test_util::TinyServedModel("taylor", 2048);  // same name, other options
  auto v = Verify(*Encode(*other, *StateAfter(*other, 4)));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(v.status().message().find("tiny-taylor"), std::string::npos) << v.status();
}

TEST_F(SnapshotTest, RefusesAFutureFormatVersion) {
  auto m = Model("linear");
  std::string bytes = *Encode(*m, *StateAfter(*m, 4));
  const uint32_t version = kSnapshotVersion + 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  Reseal(bytes);
  auto v = Verify(bytes);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find(absl::StrCat("format version ", version)),
            std::string::npos)
      << v.status();
}

// A version 1 snapshot of the same session: what servers before owners wrote (the
// owner's bytes dropped, the owner_bytes field back to reserved 0, sizes fixed up).
std::string AsVersion1(std::string v2) {
  uint32_t header_bytes, owner_bytes;
  std::memcpy(&header_bytes, v2.data() + 12, 4);
  std::memcpy(&owner_bytes, v2.data() + 92, 4);
  v2.erase(header_bytes - owner_bytes, owner_bytes);
  const uint32_t version = 1, zero = 0, header = header_bytes - owner_bytes;
  const uint64_t total = v2.size();
  std::memcpy(v2.data() + 8, &version, 4);
  std::memcpy(v2.data() + 12, &header, 4);
  std::memcpy(v2.data() + 16, &total, 8);
  std::memcpy(v2.data() + 92, &zero, 4);
  const uint32_t crc = Crc32c(0, v2.data(), v2.size() - 4);
  std::memcpy(v2.data() + v2.size() - 4, &crc, 4);
  return v2;
}

TEST_F(SnapshotTest, OwnerSurvivesTheRoundTrip) {
  auto m = Model("taylor");
  auto state = StateAfter(*m, 9);
  SnapshotInfo info;
  info.owner = "acme-research";
  const std::string bytes = EncodeSnapshot(*m, state.get(), info);
  uint32_t version;
  std::memcpy(&version, bytes.data() + 8, 4);
  EXPECT_EQ(version, kSnapshotVersion);
  auto verified = Verify(bytes);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->info.owner, "acme-research");
  EXPECT_EQ(SnapshotOwner(bytes).value(), "acme-research");
  // The default tenant is written out like any other.
  auto plain = Verify(*Encode(*m, *state));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ(plain->info.owner, kDefaultTenant);
}

TEST_F(SnapshotTest, Version1SnapshotsLoadAsTheDefaultTenantsAndContinueIdentically) {
  auto m = Model("softmax");
  auto state = StateAfter(*m, 11);
  SnapshotInfo info;
  info.owner = "someone";
  info.pending_token = 66;
  info.ttl = absl::Minutes(3);
  const std::string v1 = AsVersion1(EncodeSnapshot(*m, state.get(), info));
  uint32_t version;
  std::memcpy(&version, v1.data() + 8, 4);
  ASSERT_EQ(version, 1u);
  EXPECT_EQ(SnapshotOwner(v1).value(), kDefaultTenant);
  auto verified = Verify(v1);
  ASSERT_TRUE(verified.ok()) << verified.status();
  EXPECT_EQ(verified->info.owner, kDefaultTenant);
  EXPECT_EQ(verified->info.position, 11);
  EXPECT_EQ(verified->info.pending_token, 66);
  EXPECT_EQ(verified->info.ttl, absl::Minutes(3));
  auto restored = RestoreSnapshotState(*verified);
  ASSERT_TRUE(restored.ok()) << restored.status();
  std::vector<model::DecodeState*> a = {state.get()}, b = {restored->get()};
  EXPECT_TRUE(at::equal(m->model->Step(a, {70}).value(), m->model->Step(b, {70}).value()));
}

// A copy of tiny-softmax (the same weights and fingerprint) whose KV caches store `type`.
std::shared_ptr<const ServedModel> TinySoftmaxStoring(attention::KvCacheType type) {
  model::ModelConfig c = test_util::TinyServedModel("softmax", 4096)->model->config();
  c.attention.kv_cache_type = type;
  auto m = model::Model::Create(c, 3);
  EXPECT_TRUE(m.ok()) << m.status();
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") == std::string::npos) t.mul_(20);
  }
  return std::make_shared<ServedModel>(ServedModel{c.name, "", std::move(m).value(), {},
                                                   std::make_shared<tokenizer::ByteTokenizer>()});
}

// Version 3: a 16-bit KV cache is written as it is stored (half the bytes) and continues
// bit-identically; the KV type is a serving choice, not part of the fingerprint, so a
// snapshot moves between servers of different types: an f16 one widens exactly into an
// f32 server, an f32 one is rounded to nearest even into an f16 server (the bits an f16
// server would have stored for the same rows).
TEST_F(SnapshotTest, SixteenBitKvCachesRoundTripAndMoveBetweenKvTypes) {
  using attention::KvCacheType;
  for (KvCacheType type : {KvCacheType::kF16, KvCacheType::kBF16}) {
    SCOPED_TRACE(attention::KvCacheTypeName(type));
    auto m16 = TinySoftmaxStoring(type);
    auto m32 = Model("softmax");
    ASSERT_EQ(m16->model->Fingerprint(), m32->model->Fingerprint());
    ModelCatalogue only16({m16});
    auto state16 = StateAfter(*m16, 37);
    auto bytes16 = Encode(*m16, *state16);
    auto verified = VerifySnapshot(bytes16, only16, kMaxBytes);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->state_bytes, m16->model->StateBytes(37));
    EXPECT_EQ(2 * m16->model->StateBytes(37), m32->model->StateBytes(37));
    auto restored = RestoreSnapshotState(*verified);
    ASSERT_TRUE(restored.ok()) << restored.status();
    for (int step = 0; step < 5; ++step) {
      std::vector<model::DecodeState*> a = {state16.get()}, b = {restored->get()};
      ASSERT_TRUE(at::equal(m16->model->Step(a, {int32_t(70 + step)}).value(),
                            m16->model->Step(b, {int32_t(70 + step)}).value()))
          << "step " << step;
    }

    // f16 -> an f32 server: widened exactly.
    auto into32 = Verify(*bytes16);
    ASSERT_TRUE(into32.ok()) << into32.status();
    auto widened = RestoreSnapshotState(*into32);
    ASSERT_TRUE(widened.ok()) << widened.status();
    auto fresh16 = StateAfter(*m16, 37);
    for (int l = 0; l < fresh16->num_layers(); ++l) {
      const auto want = fresh16->layer(l).Tensors(), got = (*widened)->layer(l).Tensors();
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_EQ(got[i].second.scalar_type(), at::kFloat);
        EXPECT_TRUE(at::equal(got[i].second, want[i].second.to(at::kFloat))) << l << " " << i;
      }
    }
    // f32 -> an f16 server: rounded once, to what the f16 cache stores for those rows.
    auto state32 = StateAfter(*m32, 37);
    auto into16 = VerifySnapshot(Encode(*m32, *state32), only16, kMaxBytes);
    ASSERT_TRUE(into16.ok()) << into16.status();
    auto narrowed = RestoreSnapshotState(*into16);
    ASSERT_TRUE(narrowed.ok()) << narrowed.status();
    for (int l = 0; l < state32->num_layers(); ++l) {
      const auto want = state32->layer(l).Tensors(), got = (*narrowed)->layer(l).Tensors();
      for (size_t i = 0; i < want.size(); ++i) {
        EXPECT_TRUE(at::equal(got[i].second, want[i].second.to(got[i].second.scalar_type())));
      }
    }

    // A 16-bit tensor under version 2 (which holds only float32) is refused.
    std::string v2 = *bytes16;
    const uint32_t two = 2;
    std::memcpy(v2.data() + 8, &two, 4);
    Reseal(v2);
    auto refused = VerifySnapshot(std::make_shared<const std::string>(v2), only16, kMaxBytes);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("is not float32"), std::string::npos)
        << refused.status();
  }
}

TEST_F(SnapshotTest, RefusesAnOwnerThatDisagreesWithTheHeaderSize) {
  auto m = Model("linear");
  SnapshotInfo info;
  info.owner = "abc";
  std::string bytes = EncodeSnapshot(*m, StateAfter(*m, 2).get(), info);
  const uint32_t owner_bytes = 300;  // over the limit, and past header_bytes
  std::memcpy(bytes.data() + 92, &owner_bytes, 4);
  Reseal(bytes);
  EXPECT_EQ(Verify(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SnapshotOwner(bytes).status().code(), absl::StatusCode::kInvalidArgument);
  const uint32_t two = 2;  // within the limit, but the header ends elsewhere
  std::memcpy(bytes.data() + 92, &two, 4);
  Reseal(bytes);
  auto v = Verify(bytes);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("header_bytes"), std::string::npos) << v.status();
  EXPECT_FALSE(SnapshotOwner(bytes).ok());
}

TEST_F(SnapshotTest, RefusesAbsurdDeclaredSizesBeforeReadingThem) {
  auto m = Model("taylor");
  std::string bytes = *Encode(*m, *StateAfter(*m, 4));
  std::string huge = bytes;
  const uint64_t total = uint64_t{1} << 62;
  std::memcpy(huge.data() + 16, &total, 8);
  auto declared = SnapshotTotalBytes(huge, kMaxBytes);
  EXPECT_EQ(declared.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(declared.status().message().find("limit"), std::string::npos);
  // A forged tensor shape with a valid checksum: the model decides, not the file.
  auto verified = Verify(bytes);
  ASSERT_TRUE(verified.ok());
  const size_t dims = verified->payload_offsets[0][0] - 3 * 8;  // "s" is (H, m, Dv)
  const int64_t forged = int64_t{1} << 40;
  std::memcpy(bytes.data() + dims, &forged, 8);
  Reseal(bytes);
  auto v = Verify(bytes);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("has shape"), std::string::npos) << v.status();
}

// A grouped-query session's snapshot carries its KV heads only: half the bytes of the
// multi-head model's here (2 KV heads for 4 query heads, against 2 for 2 in tiny-), and a
// state claiming another KV-head count (the 4 of a multi-head model) is refused.
TEST_F(SnapshotTest, GroupedQueryStatesCarryKvHeadsAndRefuseAnotherCount) {
  for (const char* module : {"taylor", "linear", "softmax"}) {
    SCOPED_TRACE(module);
    auto m = Model(std::string("gqa-") + module);
    std::string bytes = *Encode(*m, *StateAfter(*m, 9));
    auto verified = Verify(bytes);
    ASSERT_TRUE(verified.ok()) << verified.status();
    EXPECT_EQ(verified->state_bytes, m->model->StateBytes(9));
    model::ModelConfig mha = m->model->config();
    mha.attention.num_kv_heads = 4;
    EXPECT_EQ(2 * verified->state_bytes, model::Model::Create(mha, 1).value()->StateBytes(9));
    // The first dimension of layer 0's first tensor ("s" (Hkv, m, Dv) or "k" (Hkv, T, D)).
    const size_t rank = 3, dims = verified->payload_offsets[0][0] - rank * 8;
    int64_t kv_heads;
    std::memcpy(&kv_heads, bytes.data() + dims, 8);
    ASSERT_EQ(kv_heads, 2);
    kv_heads = 4;
    std::memcpy(bytes.data() + dims, &kv_heads, 8);
    Reseal(bytes);
    auto v = Verify(bytes);
    EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(v.status().message().find("has shape (4, "), std::string::npos) << v.status();
    EXPECT_NE(v.status().message().find("needs (2, "), std::string::npos) << v.status();
  }
}

TEST_F(SnapshotTest, RefusesAPositionPastTheContextAndTheWrongLayerCount) {
  auto m = Model("taylor");
  std::string bytes = *Encode(*m, *StateAfter(*m, 4));
  std::string far = bytes;
  const int64_t position = 1 << 20;
  std::memcpy(far.data() + 56, &position, 8);
  Reseal(far);
  EXPECT_EQ(Verify(far).status().code(), absl::StatusCode::kInvalidArgument);
  const uint32_t layers = 3;
  std::memcpy(bytes.data() + 68, &layers, 4);
  Reseal(bytes);
  auto v = Verify(bytes);
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v.status().message().find("layers"), std::string::npos) << v.status();
}

TEST_F(SnapshotTest, FingerprintNamesWeightsAndModule) {
  auto a = test_util::TinyServedModel("taylor");
  auto b = test_util::TinyServedModel("taylor");  // same config and seed
  EXPECT_EQ(a->model->Fingerprint(), b->model->Fingerprint());
  auto c = test_util::TinyServedModel("linear");
  EXPECT_NE(a->model->Fingerprint(), c->model->Fingerprint());
  auto d = test_util::TinyServedModel("taylor");
  d->model->NamedParameters()[1].second.add_(1e-3);  // other weights, same config
  EXPECT_NE(d->model->Fingerprint(), b->model->Fingerprint());
}

TEST_F(SnapshotTest, ServeAsVariantsShareWeightsButNotFingerprints) {
  model::ModelConfig c = Model("softmax")->model->config();
  c.attention.qk_norm = true;
  auto base = model::Model::Create(c, 5).value();
  auto variant = base->ServeAs("taylor", 4, c.attention.max_state_bytes_per_layer);
  ASSERT_TRUE(variant.ok()) << variant.status();
  EXPECT_NE((*variant)->Fingerprint(), base->Fingerprint());
  EXPECT_TRUE((*variant)->NamedParameters()[0].second.is_same(base->NamedParameters()[0].second));
  EXPECT_EQ((*variant)->config().attention.module, "taylor");
  EXPECT_EQ((*variant)->config().attention.order, 4);
  EXPECT_FALSE(base->ServeAs("linear", 0, c.attention.max_state_bytes_per_layer).ok());
}

}  // namespace
}  // namespace attnserve::session
