#include "server/attention/state_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace attnserve::attention {

namespace {
constexpr int64_t kLineFloats = 64 / sizeof(float);
}  // namespace

StatePool::Slot::~Slot() { pool_->Free(index_); }

std::shared_ptr<StatePool> StatePool::Create(int64_t slot_floats) {
  TORCH_CHECK(slot_floats > 0, "StatePool: slots of ", slot_floats, " floats");
  return std::shared_ptr<StatePool>(new StatePool(slot_floats));
}

StatePool::StatePool(int64_t slot_floats)
    : slot_floats_(slot_floats),
      stride_((slot_floats + kLineFloats - 1) / kLineFloats * kLineFloats) {}

std::shared_ptr<StatePool::Slot> StatePool::Allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_.empty()) AddSlab();
  const int64_t index = free_.top();
  free_.pop();
  ++live_;
  return std::shared_ptr<Slot>(new Slot(shared_from_this(), index, SlotData(index)));
}

// Slabs stay allocated once free: the memory budget admitted the sessions that filled
// them, so keeping them holds no more than it allows, while releasing them would make a
// live count that hovers at a slab boundary allocate and fault in a slab per session.
// Pages of never-used slots are not touched, so they cost address space only.
void StatePool::Free(int64_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push(index);
  --live_;
}

void StatePool::AddSlab() {
  const int64_t slots = std::clamp(capacity_, kFirstSlabSlots, kMaxSlabSlots);
  // LibTorch's CPU allocator aligns to 64 bytes, and throws c10::Error when out of memory.
  slabs_.push_back({capacity_, at::empty({slots * stride_}, at::kFloat)});
  for (int64_t i = capacity_; i < capacity_ + slots; ++i) free_.push(i);
  capacity_ += slots;
}

float* StatePool::SlotData(int64_t index) const {
  // The last slab starting at or before `index`; slabs are few, in order of `first`.
  auto slab = std::upper_bound(slabs_.begin(), slabs_.end(), index,
                               [](int64_t i, const Slab& s) { return i < s.first; });
  --slab;
  return slab->memory.data_ptr<float>() + (index - slab->first) * stride_;
}

int64_t StatePool::live_slots() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

int64_t StatePool::capacity() const {
  std::lock_guard<std::mutex> lock(mu_);
  return capacity_;
}

}  // namespace attnserve::attention
