// A SnapshotStore in memory for session tests, with hooks: every call first runs the hook
// for its operation ("Put", "Get", "Delete", "AcquireLease", "RenewLease", "ReleaseLease",
// "PutFenced", "GetWithGeneration", "GetGeneration"), so a test can pause a call at a
// chosen point (a Gate) and drive a race without sleeps, count calls, or record which
// thread made them. Leases and fenced writes follow SnapshotStore's contract (generation
// per snapshot, reset by Delete; a lease is refused while another token holds it); leases
// never expire by time. Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "server/store/snapshot_store.h"

namespace attnserve::session::testing {

// A one-shot pause: Wait() blocks the caller (announcing it in `reached`) until Open().
class Gate {
 public:
  void Wait() {
    reached_.Notify();
    opened_.WaitForNotification();
  }
  // Blocks until some thread is waiting at the gate.
  void AwaitReached() { reached_.WaitForNotification(); }
  void Open() { opened_.Notify(); }

 private:
  absl::Notification reached_, opened_;
};

class HookedStore : public store::SnapshotStore {
 public:
  using Hook = std::function<void(const std::string& op, const std::string& id)>;

  // Runs before every call (outside the store's lock). Set it before the store is shared.
  void set_hook(Hook hook) {
    absl::MutexLock lock(&mu_);
    hook_ = std::move(hook);
  }
  // Calls made so far: (operation, id, calling thread).
  struct Call {
    std::string op, id;
    std::thread::id thread;
  };
  std::vector<Call> calls() const {
    absl::MutexLock lock(&mu_);
    return calls_;
  }
  int count(const std::string& op) const {
    int n = 0;
    for (const auto& c : calls()) n += c.op == op;
    return n;
  }
  bool has(const std::string& id) const {
    absl::MutexLock lock(&mu_);
    return data_.count(id) != 0;
  }
  size_t stored() const {
    absl::MutexLock lock(&mu_);
    return data_.size();
  }
  // While true, Delete answers UNAVAILABLE and deletes nothing (a store blip).
  void set_delete_fails(bool fails) {
    absl::MutexLock lock(&mu_);
    delete_fails_ = fails;
  }
  // Makes `id`'s lease look held by another server (AcquireLease answers ABORTED).
  void HoldLeaseElsewhere(const std::string& id) {
    absl::MutexLock lock(&mu_);
    leases_[id] = "elsewhere";
  }

  absl::Status Put(const std::string& id, std::string_view bytes, absl::Duration) override {
    Enter("Put", id);
    absl::MutexLock lock(&mu_);
    Entry& e = data_[id];
    e.bytes = std::string(bytes);
    ++e.generation;
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Get(const std::string& id) override {
    Enter("Get", id);
    absl::MutexLock lock(&mu_);
    auto it = data_.find(id);
    if (it == data_.end()) return absl::NotFoundError(id);
    return it->second.bytes;
  }
  absl::Status Delete(const std::string& id) override {
    Enter("Delete", id);
    absl::MutexLock lock(&mu_);
    if (delete_fails_) return store::StoreUnavailable(name_, "Connection refused");
    data_.erase(id);
    return absl::OkStatus();
  }
  absl::StatusOr<int> RemoveExpired() override { return 0; }
  absl::StatusOr<store::LeaseGrant> AcquireLease(const std::string& id, absl::Duration) override {
    Enter("AcquireLease", id);
    absl::MutexLock lock(&mu_);
    if (leases_.count(id)) return store::LeaseHeldError(id);
    store::LeaseGrant grant{absl::StrCat("token", ++tokens_), Generation(id)};
    leases_[id] = grant.token;
    return grant;
  }
  absl::Status RenewLease(const std::string& id, const std::string& token,
                          absl::Duration) override {
    Enter("RenewLease", id);
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(id);
    if (it == leases_.end() || it->second != token) return store::LeaseLostError(id);
    return absl::OkStatus();
  }
  absl::Status ReleaseLease(const std::string& id, const std::string& token) override {
    Enter("ReleaseLease", id);
    absl::MutexLock lock(&mu_);
    auto it = leases_.find(id);
    if (it != leases_.end() && it->second == token) leases_.erase(it);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> PutFenced(const std::string& id, std::string_view bytes,
                                    absl::Duration, const std::string& token,
                                    int64_t generation) override {
    Enter("PutFenced", id);
    absl::MutexLock lock(&mu_);
    auto lease = leases_.find(id);
    if (lease == leases_.end() || lease->second != token) return store::LeaseLostError(id);
    if (Generation(id) != generation) {
      return store::StaleGenerationError(id, generation, Generation(id));
    }
    Entry& e = data_[id];
    e.bytes = std::string(bytes);
    e.generation = generation + 1;
    return e.generation;
  }
  absl::StatusOr<std::pair<std::string, int64_t>> GetWithGeneration(
      const std::string& id) override {
    Enter("GetWithGeneration", id);
    absl::MutexLock lock(&mu_);
    auto it = data_.find(id);
    if (it == data_.end()) return absl::NotFoundError(id);
    return std::make_pair(it->second.bytes, it->second.generation);
  }
  absl::StatusOr<int64_t> GetGeneration(const std::string& id) override {
    Enter("GetGeneration", id);
    absl::MutexLock lock(&mu_);
    return Generation(id);
  }
  const std::string& name() const override { return name_; }

 private:
  struct Entry {
    std::string bytes;
    int64_t generation = 0;
  };
  void Enter(const std::string& op, const std::string& id) {
    Hook hook;
    {
      absl::MutexLock lock(&mu_);
      calls_.push_back({op, id, std::this_thread::get_id()});
      hook = hook_;
    }
    if (hook) hook(op, id);
  }
  int64_t Generation(const std::string& id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    auto it = data_.find(id);
    return it == data_.end() ? 0 : it->second.generation;
  }

  const std::string name_ = "hooked:";
  mutable absl::Mutex mu_;
  Hook hook_ ABSL_GUARDED_BY(mu_);
  std::vector<Call> calls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Entry> data_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> leases_ ABSL_GUARDED_BY(mu_);
  int tokens_ ABSL_GUARDED_BY(mu_) = 0;
  bool delete_fails_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace attnserve::session::testing
