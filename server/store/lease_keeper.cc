#include "server/store/lease_keeper.h"

#include <algorithm>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"

namespace attnserve::store {

LeaseKeeper::LeaseKeeper(SnapshotStore* store, Options options,
                         metrics::StoreMetrics* metrics)
    : store_(store), options_(options), metrics_(metrics) {
  renewer_ = std::thread([this] { RenewLoop(); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  renewer_.join();
}

absl::StatusOr<LeaseGrant> LeaseKeeper::Acquire(const std::string& id, bool wait) {
  const absl::Time deadline = absl::Now() + (wait ? options_.wait : absl::ZeroDuration());
  absl::Duration backoff = absl::Milliseconds(2);
  bool waited = false;
  while (true) {
    auto grant = store_->AcquireLease(id, options_.ttl);
    if (grant.ok()) {
      if (metrics_) metrics_->AddLeaseTaken(waited);
      std::lock_guard<std::mutex> lock(mu_);
      held_[id] = grant->token;
      return grant;
    }
    if (!absl::IsAborted(grant.status())) return grant.status();
    // Another server runs a turn on this session: wait for its turn boundary.
    const absl::Time now = absl::Now();
    if (now >= deadline) {
      if (metrics_) metrics_->AddLeaseTimeout();
      return absl::AbortedError(absl::StrCat(
          "session '", id, "' has a turn in flight on another server; retry shortly"));
    }
    waited = true;
    absl::SleepFor(std::min(backoff, deadline - now));
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
}

bool LeaseKeeper::Held(const std::string& id, const std::string& token) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = held_.find(id);
  return it != held_.end() && it->second == token;
}

absl::StatusOr<int64_t> LeaseKeeper::WriteFenced(const std::string& id, std::string_view bytes,
                                                 absl::Duration ttl, const std::string& token,
                                                 int64_t generation) {
  auto written = store_->PutFenced(id, bytes, ttl, token, generation);
  if (absl::IsAborted(written.status())) {
    if (metrics_) metrics_->AddLeaseLost();
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(id);
    if (it != held_.end() && it->second == token) held_.erase(it);
  }
  return written;
}

void LeaseKeeper::Release(const std::string& id, const std::string& token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = held_.find(id);
    if (it != held_.end() && it->second == token) held_.erase(it);
  }
  if (absl::Status s = store_->ReleaseLease(id, token); !s.ok()) {
    std::fprintf(stderr, "attnserve: releasing the lease on session %s: %s (it lapses)\n",
                 id.c_str(), std::string(s.message()).c_str());
  }
}

void LeaseKeeper::RenewLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, absl::ToChronoNanoseconds(options_.ttl / 3), [this] { return stop_; });
    if (stop_) return;
    const std::vector<std::pair<std::string, std::string>> held(held_.begin(), held_.end());
    lock.unlock();
    for (const auto& [id, token] : held) {
      absl::Status s = store_->RenewLease(id, token, options_.ttl);
      if (!absl::IsAborted(s)) continue;
      // Lapsed (a stalled process, or the store lost it): whoever holds it now owns the
      // session; our next write would be refused by its fence anyway. A lease released
      // since the list above was taken is not lost.
      std::lock_guard<std::mutex> relock(mu_);
      auto it = held_.find(id);
      if (it == held_.end() || it->second != token) continue;
      held_.erase(it);
      std::fprintf(stderr, "attnserve: lost the lease on session %s\n", id.c_str());
      if (metrics_) metrics_->AddLeaseLost();
    }
    lock.lock();
  }
}

}  // namespace attnserve::store
