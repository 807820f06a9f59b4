// Fixed-size slots for the per-session states of one fixed-state attention module
// (server/DESIGN.md §2, "State pools"): every session's state for a layer sits in one
// of a few large slabs rather than in tensors of its own, so a batched decode step walks
// packed memory, and forking or snapshotting a state is a slot copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <queue>
#include <vector>

namespace attnserve::attention {

// Hands out slots of slot_elements() elements of element_bytes() bytes each (4: fp32; 2:
// bf16 under AttentionOptions::state_bf16). Slabs are allocated as needed (each at least
// doubling the capacity until slabs reach kMaxSlabSlots) and never move, so a slot's
// address is stable for its lifetime. A freed slot goes back on a free list, and
// allocation takes the lowest free slot, so live sessions stay packed at the start.
// Allocate, Slot destruction and the counts may be called from any thread; a slot's
// contents belong to its holder (the engine thread updates them without the lock).
class StatePool : public std::enable_shared_from_this<StatePool> {
 public:
  static constexpr int64_t kFirstSlabSlots = 16;
  static constexpr int64_t kMaxSlabSlots = 64;

  // A slot on loan. Returns itself to the pool on destruction, and keeps the pool (and
  // with it the slot memory) alive until then, whichever of the two goes first.
  class Slot {
   public:
    ~Slot();
    Slot(const Slot&) = delete;
    Slot& operator=(const Slot&) = delete;

    // slot_elements() elements (fp32 or bf16 as the pool was made), 64-byte aligned;
    // contents as the last holder left them.
    void* data() const { return data_; }
    // Position in the pool: 0 .. capacity() - 1.
    int64_t index() const { return index_; }
    StatePool& pool() const { return *pool_; }

   private:
    friend class StatePool;
    Slot(std::shared_ptr<StatePool> pool, int64_t index, void* data)
        : pool_(std::move(pool)), index_(index), data_(data) {}

    std::shared_ptr<StatePool> pool_;
    int64_t index_;
    void* data_;
  };

  // A pool of slots of `slot_elements` (> 0) elements of `element_bytes` (4 or 2) bytes.
  // Shared: slots hold it too.
  static std::shared_ptr<StatePool> Create(int64_t slot_elements, int64_t element_bytes = 4);

  // The lowest free slot, after adding a slab if none is free. Its contents are
  // unspecified (a previous holder's): the caller fills it. Throws c10::Error when the
  // slab cannot be allocated, as a tensor allocation would.
  std::shared_ptr<Slot> Allocate();

  int64_t slot_elements() const { return slot_elements_; }
  int64_t element_bytes() const { return element_bytes_; }
  // Bytes of one slot's contents (without its padding to a cache line).
  int64_t slot_bytes() const { return slot_elements_ * element_bytes_; }
  // Slots on loan now.
  int64_t live_slots() const;
  // Slots in all slabs allocated so far, free or not.
  int64_t capacity() const;

 private:
  StatePool(int64_t slot_elements, int64_t element_bytes);
  void Free(int64_t index);
  // Adds a slab and puts its slots on the free list.
  // Both with mu_ held.
  void AddSlab();
  void* SlotData(int64_t index) const;

  struct Slab {
    int64_t first;      // index of its first slot
    at::Tensor memory;  // (slots * stride_) bytes
  };

  const int64_t slot_elements_;
  const int64_t element_bytes_;
  // Bytes from one slot to the next: slot_bytes() rounded up to a 64-byte line, so
  // every slot starts on a cache line as a tensor of its own would.
  const int64_t stride_;
  // A std::mutex rather than absl::Mutex: TSan sees it in every test that links the pool
  // (Debian's abseil is not instrumented; tests/sanitizers/tsan_absl_sync.cc).
  mutable std::mutex mu_;
  // The rest under mu_.
  std::vector<Slab> slabs_;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_;
  int64_t capacity_ = 0;
  int64_t live_ = 0;
};

}  // namespace attnserve::attention
