// Prometheus metrics for attnserve: one registry, every metric family defined
// in metrics.cc, labelled children created once per (model, attention module)
// or per session store and cached. Torch-free; the service, scheduler and
// session store record into it, Prometheus scrapes /metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace prometheus {
class Counter;
class Exposer;
class Gauge;
class Histogram;
class Registry;
}  // namespace prometheus

namespace attnserve::metrics {

struct Families;  // every family, defined in metrics.cc

// The children of one (model, attention) label pair. Obtain it from
// Metrics::ForModel; it lives as long as the Metrics that made it. All methods
// are thread-safe and lock-free (prometheus-cpp children are atomic), so the
// engine thread may call them every step.
class ModelMetrics {
 public:
  ModelMetrics(const ModelMetrics&) = delete;
  ModelMetrics& operator=(const ModelMetrics&) = delete;

  // Counters; a negative n is ignored (Prometheus counters never go down).
  void AddPromptTokens(int64_t n);
  void AddGeneratedTokens(int64_t n);

  // Histograms, recorded in seconds.
  void ObserveTimeToFirstToken(absl::Duration d);
  void ObserveInterTokenLatency(absl::Duration d);
  void ObserveConstraintMask(absl::Duration d);  // one constrained step's token mask
  void ObserveRequestDuration(absl::Duration d);
  void ObserveBatchSize(int n);  // sessions in one engine step for this model

  // Gauges: the current value, replacing the previous one.
  void SetRunningTurns(int n);
  void SetWaitingTurns(int n);  // turns paused on a full stream (a client not reading)
  void SetActiveSessions(int n);
  void SetSessionStateBytes(int64_t bytes);  // sum over this model's sessions

 private:
  friend class Metrics;
  ModelMetrics(Families& families, const std::string& model,
               const std::string& attention);

  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& time_to_first_token_;
  prometheus::Histogram& inter_token_latency_;
  prometheus::Histogram& constraint_mask_;
  prometheus::Histogram& request_duration_;
  prometheus::Histogram& batch_size_;
  prometheus::Gauge& running_turns_;
  prometheus::Gauge& waiting_turns_;
  prometheus::Gauge& active_sessions_;
  prometheus::Gauge& session_state_bytes_;
};

// The children of one durable session store, labelled store="dir:/var/lib/x"
// or "redis://host:port". Obtain it from Metrics::ForStore; it lives as long as
// the Metrics that made it. All methods are thread-safe and lock-free.
class StoreMetrics {
 public:
  StoreMetrics(const StoreMetrics&) = delete;
  StoreMetrics& operator=(const StoreMetrics&) = delete;

  // One snapshot write (Put), read (Get) or delete: its latency (observed
  // whether or not it succeeded), the bytes it moved and whether it succeeded.
  // Bytes count only for a successful write or a read that found a snapshot; a
  // failure counts one error for its op. A read that found nothing (NOT_FOUND)
  // is ok=true, found=false, bytes=0, and is not counted as a snapshot read.
  void ObserveWrite(absl::Duration latency, int64_t bytes, bool ok);
  void ObserveRead(absl::Duration latency, int64_t bytes, bool ok, bool found);
  void ObserveDelete(absl::Duration latency, bool ok);

  // Sessions that left memory for the store (idle spill or memory pressure); a
  // negative n is ignored.
  void AddSpilled(int n);
  // A session loaded into memory from the store; `migrated` when its stored copy came
  // from another server (or replaced a stale copy this server held).
  void AddLoaded(bool migrated);
  // Store leases (one writer per session across servers): taken (after waiting for
  // another holder, or not), given up on after waiting (the caller got UNAVAILABLE),
  // and lost (lapsed, or a fenced write refused).
  void AddLeaseTaken(bool waited);
  void AddLeaseTimeout();
  void AddLeaseLost();

 private:
  friend class Metrics;
  StoreMetrics(Families& families, const std::string& store);

  prometheus::Counter& snapshots_written_;
  prometheus::Counter& snapshots_read_;
  prometheus::Counter& bytes_written_;
  prometheus::Counter& bytes_read_;
  prometheus::Histogram& write_latency_;
  prometheus::Histogram& read_latency_;
  prometheus::Histogram& delete_latency_;
  prometheus::Counter& write_errors_;
  prometheus::Counter& read_errors_;
  prometheus::Counter& delete_errors_;
  prometheus::Counter& sessions_spilled_;
  prometheus::Counter& sessions_loaded_;
  prometheus::Counter& migrations_in_;
  prometheus::Counter& leases_taken_;
  prometheus::Counter& leases_waited_;
  prometheus::Counter& leases_timed_out_;
  prometheus::Counter& leases_lost_;
};

// The process's metrics. Create one at start-up and share it; all methods are
// thread-safe.
class Metrics {
 public:
  // Serves /metrics over HTTP on `address` ("host:port"; "127.0.0.1:0" picks a
  // free port). An empty address records without serving (port() is then 0). A
  // bind failure is an Unavailable status naming the address.
  static absl::StatusOr<std::unique_ptr<Metrics>> Create(
      const std::string& address);

  // Stops the HTTP server first; that sometimes blocks for up to ~2 s inside
  // civetweb's mg_stop (known upstream: civetweb/civetweb#1163).
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // The bound port (0 if not exposed).
  int port() const { return port_; }

  // Children for one label pair; the same reference every time for the same
  // pair, valid for the lifetime of this Metrics. The first call for a pair
  // creates its series (at zero); call it when a model is loaded rather than
  // per request.
  ModelMetrics& ForModel(const std::string& model,
                         const std::string& attention);

  // Children for one session store, named as SnapshotStore::name() names it;
  // the same reference every time for the same name, valid for the lifetime of
  // this Metrics. The first call creates every series of the store (at zero);
  // call it when the store is opened rather than per operation.
  StoreMetrics& ForStore(const std::string& store);

  // Increments requests_total{method, code, model, attention}; code is the gRPC
  // status code name, e.g. "OK", "INVALID_ARGUMENT". model/attention may be
  // empty when the request failed before a model was resolved.
  void RecordRequest(const std::string& method, const std::string& code,
                     const std::string& model, const std::string& attention);

  // Sets tenant_sessions{tenant} and tenant_session_state_bytes{tenant}: what the
  // tenant holds in memory now. The label space is the keys file's tenants.
  void SetTenantUsage(const std::string& tenant, int sessions, int64_t bytes);

  // The text exposition of every attnserve family (what a scrape returns, minus
  // the HTTP exposer's own exposer_* metrics), for tests and debugging.
  std::string Serialize() const;

 private:
  Metrics();

  // Members are destroyed in reverse order: the exposer goes first, so no
  // scrape runs while the families are torn down.
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Families> families_;
  absl::Mutex mu_;
  absl::flat_hash_map<std::pair<std::string, std::string>,
                      std::unique_ptr<ModelMetrics>>
      models_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<std::string, std::unique_ptr<StoreMetrics>> stores_
      ABSL_GUARDED_BY(mu_);
  std::unique_ptr<prometheus::Exposer> exposer_;
  int port_ = 0;
};

}  // namespace attnserve::metrics
