#include "server/attention/state_pool.h"

#include <ATen/ATen.h>

#include <algorithm>

namespace attnserve::attention {

namespace {
constexpr int64_t kLineBytes = 64;
}  // namespace

StatePool::Slot::~Slot() { pool_->Free(index_); }

std::shared_ptr<StatePool> StatePool::Create(int64_t slot_elements, int64_t element_bytes) {
  TORCH_CHECK(slot_elements > 0, "StatePool: slots of ", slot_elements, " elements");
  TORCH_CHECK(element_bytes == 4 || element_bytes == 2, "StatePool: elements of ",
              element_bytes, " bytes");
  return std::shared_ptr<StatePool>(new StatePool(slot_elements, element_bytes));
}

StatePool::StatePool(int64_t slot_elements, int64_t element_bytes)
    : slot_elements_(slot_elements),
      element_bytes_(element_bytes),
      stride_((slot_elements * element_bytes + kLineBytes - 1) / kLineBytes * kLineBytes) {}

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
  slabs_.push_back({capacity_, at::empty({slots * stride_}, at::kByte)});
  for (int64_t i = capacity_; i < capacity_ + slots; ++i) free_.push(i);
  capacity_ += slots;
}

void* StatePool::SlotData(int64_t index) const {
  // The last slab starting at or before `index`; slabs are few, in order of `first`.
  auto slab = std::upper_bound(slabs_.begin(), slabs_.end(), index,
                               [](int64_t i, const Slab& s) { return i < s.first; });
  --slab;
  return slab->memory.data_ptr<uint8_t>() + (index - slab->first) * stride_;
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
