// StatePool hands out distinct, stable, reusable slots from growing slabs, from any
// thread; FeatureAttention keeps every state of its module in one.
#include "server/attention/state_pool.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "server/attention/feature_attention.h"
#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

using SlotPtr = std::shared_ptr<StatePool::Slot>;

constexpr int64_t kSlotFloats = 100;  // not a multiple of a cache line: slots are padded

// A slot of an fp32 pool as its floats.
float* Floats(const SlotPtr& slot) { return static_cast<float*>(slot->data()); }

std::vector<SlotPtr> AllocateN(StatePool& pool, int n) {
  std::vector<SlotPtr> slots;
  for (int i = 0; i < n; ++i) slots.push_back(pool.Allocate());
  return slots;
}

TEST(StatePool, SlotsAreDistinctAlignedAndStableAcrossSlabs) {
  auto pool = StatePool::Create(kSlotFloats);
  std::vector<SlotPtr> slots = AllocateN(*pool, 3);
  std::vector<float*> first;
  for (size_t i = 0; i < slots.size(); ++i) {
    float* p = Floats(slots[i]);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    for (int64_t f = 0; f < kSlotFloats; ++f) p[f] = float(i * 1000 + f);
    first.push_back(p);
  }
  // Consecutive slots of a slab are packed: one cache-line-padded slot apart.
  EXPECT_EQ(first[1] - first[0], 112);
  EXPECT_EQ(first[2] - first[1], 112);
  // Growing by several slabs neither moves nor overwrites the first slots.
  std::vector<SlotPtr> more = AllocateN(*pool, 100);
  std::set<float*> all(first.begin(), first.end());
  for (const SlotPtr& s : more) all.insert(Floats(s));
  EXPECT_EQ(all.size(), 103u);
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ(Floats(slots[i]), first[i]);
    for (int64_t f = 0; f < kSlotFloats; ++f) ASSERT_EQ(first[i][f], float(i * 1000 + f));
  }
}

TEST(StatePool, Bf16SlotsAreHalfAsWideAndStillStartOnACacheLine) {
  auto pool = StatePool::Create(kSlotFloats, /*element_bytes=*/2);
  EXPECT_EQ(pool->slot_bytes(), 2 * kSlotFloats);
  std::vector<SlotPtr> slots = AllocateN(*pool, 3);
  const auto* first = static_cast<const char*>(slots[0]->data());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
  // 200 bytes padded to 256 (fp32: 400 to 448).
  EXPECT_EQ(static_cast<const char*>(slots[1]->data()) - first, 256);
  EXPECT_EQ(static_cast<const char*>(slots[2]->data()) - first, 512);
}

TEST(StatePool, ReusesTheLowestFreeSlotFirst) {
  auto pool = StatePool::Create(kSlotFloats);
  std::vector<SlotPtr> slots = AllocateN(*pool, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(slots[i]->index(), i);
  float* data1 = Floats(slots[1]);
  slots[3].reset();
  slots[1].reset();
  EXPECT_EQ(pool->live_slots(), 3);
  SlotPtr a = pool->Allocate(), b = pool->Allocate(), c = pool->Allocate();
  EXPECT_EQ(a->index(), 1);
  EXPECT_EQ(Floats(a), data1);
  EXPECT_EQ(b->index(), 3);
  EXPECT_EQ(c->index(), 5);
  EXPECT_EQ(pool->live_slots(), 6);
}

TEST(StatePool, CapacityGrowsBySlabsDoublingUpToTheLargestSlab) {
  auto pool = StatePool::Create(kSlotFloats);
  EXPECT_EQ(pool->capacity(), 0);
  std::vector<SlotPtr> slots;
  // Capacity after each slab: 16, 32, 64, 128, then slabs of 64.
  const std::vector<std::pair<int, int64_t>> steps = {
      {1, 16}, {16, 16}, {17, 32}, {33, 64}, {65, 128}, {129, 192}, {193, 256}};
  for (const auto& [live, capacity] : steps) {
    while (int(slots.size()) < live) slots.push_back(pool->Allocate());
    EXPECT_EQ(pool->live_slots(), live);
    EXPECT_EQ(pool->capacity(), capacity) << "with " << live << " live slots";
  }
  slots.clear();
  EXPECT_EQ(pool->live_slots(), 0);
  EXPECT_EQ(pool->capacity(), 256);  // slabs are kept
  EXPECT_EQ(pool->Allocate()->index(), 0);
}

TEST(StatePool, SlotKeepsThePoolAlive) {
  auto pool = StatePool::Create(kSlotFloats);
  SlotPtr slot = pool->Allocate();
  pool.reset();
  Floats(slot)[kSlotFloats - 1] = 7.0f;
  EXPECT_EQ(slot->pool().live_slots(), 1);
  EXPECT_EQ(Floats(slot)[kSlotFloats - 1], 7.0f);
}

TEST(StatePool, ConcurrentAllocateAndFreeKeepCountsAndSlotsExclusive) {
  auto pool = StatePool::Create(kSlotFloats);
  constexpr int kThreads = 4, kRounds = 300, kHeld = 5;
  std::vector<int> clashes(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int r = 0; r < kRounds; ++r) {
        std::vector<SlotPtr> held = AllocateN(*pool, 1 + r % kHeld);
        for (const SlotPtr& s : held) std::fill_n(Floats(s), kSlotFloats, float(t));
        for (const SlotPtr& s : held) {
          if (Floats(s)[0] != float(t) || Floats(s)[kSlotFloats - 1] != float(t)) {
            ++clashes[t];
          }
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(clashes[t], 0) << "thread " << t;
  EXPECT_EQ(pool->live_slots(), 0);
  // At most kThreads * kHeld slots were ever live at once: two slabs of 16.
  EXPECT_LE(pool->capacity(), 32);
  std::vector<SlotPtr> again = AllocateN(*pool, 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(again[i]->index(), i);
}

// FeatureAttention keeps its states in its pool.
class FeatureAttentionPool : public testing::Test {
 protected:
  void SetUp() override {
    AttentionOptions o;
    o.module = "taylor";
    o.order = 2;
    o.num_heads = 2;
    o.num_kv_heads = 2;
    o.head_dim = 4;
    o.value_dim = 4;
    auto a = CreateAttention(o);
    ASSERT_TRUE(a.ok()) << a.status();
    attention_ = std::move(a).value();
    feature_ = dynamic_cast<FeatureAttention*>(attention_.get());
    ASSERT_NE(feature_, nullptr);
  }

  // Appends t random tokens to `state`.
  void Prefill(AttentionState& state, int64_t t, uint64_t seed) {
    at::manual_seed(seed);
    const auto& o = attention_->options();
    attention_->Prefill(state, at::randn({o.num_heads, t, o.head_dim}),
                        at::randn({o.num_heads, t, o.head_dim}),
                        at::randn({o.num_heads, t, o.value_dim}));
  }

  const StatePool& pool() const { return feature_->pool(); }
  static float* Data(const AttentionState& st) {
    return st.Tensors()[0].second.data_ptr<float>();
  }

  std::unique_ptr<Attention> attention_;
  FeatureAttention* feature_ = nullptr;
};

TEST_F(FeatureAttentionPool, SlotHoldsSThenZAndBytesAreTheSlot) {
  auto st = attention_->NewState();
  // m = 1 + 4 + 10 = 15 Taylor features: s (2, 15, 4), z (2, 15).
  EXPECT_EQ(pool().slot_elements(), 2 * 15 * 4 + 2 * 15);
  EXPECT_EQ(pool().element_bytes(), 4);
  EXPECT_EQ(st->Bytes(), pool().slot_bytes());
  const NamedTensors t = st->Tensors();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].second.data_ptr<float>(), t[0].second.data_ptr<float>() + 2 * 15 * 4);
  EXPECT_TRUE(t[0].second.is_contiguous() && t[1].second.is_contiguous());
}

TEST_F(FeatureAttentionPool, NewStateIsZeroInAReusedSlot) {
  auto a = attention_->NewState();
  auto b = attention_->NewState();
  float* slot_a = Data(*a);
  EXPECT_EQ(Data(*b) - slot_a, 160);  // the next slot: 150 floats padded to 64 bytes
  Prefill(*a, 5, 1);
  EXPECT_GT(a->Tensors()[0].second.abs().sum().item<float>(), 0);
  a.reset();
  EXPECT_EQ(pool().live_slots(), 1);
  auto c = attention_->NewState();
  EXPECT_EQ(Data(*c), slot_a);
  for (const auto& [name, t] : c->Tensors()) EXPECT_EQ(t.abs().sum().item<float>(), 0) << name;
}

TEST_F(FeatureAttentionPool, CloneAndCheckpointAreIndependentSlots) {
  auto st = attention_->NewState();
  Prefill(*st, 6, 2);
  auto clone = st->Clone();
  auto checkpoint = st->Checkpoint();
  EXPECT_EQ(pool().live_slots(), 3);
  EXPECT_NE(Data(*clone), Data(*st));
  EXPECT_NE(Data(*checkpoint), Data(*clone));
  std::vector<at::Tensor> before;
  for (const auto& [name, t] : st->Tensors()) before.push_back(t.clone());
  Prefill(*st, 3, 3);
  for (const AttentionState* copy : {clone.get(), checkpoint.get()}) {
    EXPECT_EQ(copy->Position(), 6);
    const NamedTensors t = copy->Tensors();
    for (size_t i = 0; i < t.size(); ++i) EXPECT_TRUE(at::equal(t[i].second, before[i]));
  }
  EXPECT_FALSE(at::equal(st->Tensors()[0].second, before[0]));
  clone.reset();
  checkpoint.reset();
  st.reset();
  EXPECT_EQ(pool().live_slots(), 0);
}

TEST_F(FeatureAttentionPool, RestoreStateCopiesIntoThePool) {
  const TensorShapes shapes = attention_->StateShapes(9);
  NamedTensors tensors;
  at::manual_seed(4);
  for (const auto& [name, shape] : shapes) {
    // fp64 and transposed: converted on the way in.
    tensors.push_back({name, at::randn(shape, at::kDouble).transpose(0, -1).contiguous()
                                 .transpose(0, -1)});
  }
  auto st = attention_->RestoreState(9, tensors);
  EXPECT_EQ(st->Position(), 9);
  EXPECT_EQ(pool().live_slots(), 1);
  const NamedTensors restored = st->Tensors();
  for (size_t i = 0; i < shapes.size(); ++i) {
    EXPECT_TRUE(at::allclose(restored[i].second, tensors[i].second.to(at::kFloat)));
    tensors[i].second.fill_(0);
    EXPECT_GT(restored[i].second.abs().sum().item<float>(), 0);  // a copy, not a view
  }
}

TEST_F(FeatureAttentionPool, TensorsOutliveTheirStateAndHoldTheSlot) {
  auto st = attention_->NewState();
  Prefill(*st, 4, 5);
  const NamedTensors views = st->Tensors();
  const at::Tensor copy = views[0].second.clone();
  st.reset();
  EXPECT_EQ(pool().live_slots(), 1);  // held by the views
  auto other = attention_->NewState();  // must not land in the viewed slot
  EXPECT_NE(Data(*other), views[0].second.data_ptr<float>());
  EXPECT_TRUE(at::equal(views[0].second, copy));
}

TEST_F(FeatureAttentionPool, ConcurrentNewCloneAndDestroyKeepCounts) {
  constexpr int kThreads = 4, kRounds = 100;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int r = 0; r < kRounds; ++r) {
        auto st = attention_->NewState();
        auto clone = st->Clone();
        auto restored = attention_->RestoreState(0, st->Tensors());
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(pool().live_slots(), 0);
  EXPECT_LE(pool().capacity(), 16);  // at most 12 states at once: one slab
}

}  // namespace
}  // namespace attnserve::attention
