// Assembles a running attnserve: models, session store, scheduler, metrics endpoint, and
// the gRPC server with health checking and reflection. Used by the attnserve_server
// binary and by in-process tests.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/server.h>

#include "absl/status/statusor.h"
#include "server/config/server_options.h"
#include "server/http/http_front.h"
#include "server/metrics/metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/service/attnserve_service.h"
#include "server/service/convert.h"
#include "server/session/session_store.h"

namespace attnserve::service {

// Sets each served model's and variant's session gauges (active sessions, state bytes)
// from `sessions`: a session counts under the model or variant it runs on (labelled by
// its attention module); one with no session reads 0.
void PublishSessionGauges(const catalogue::ModelCatalogue& models,
                          const std::vector<session::SessionInfo>& sessions,
                          metrics::Metrics& metrics);

class AttnServer {
 public:
  // Serves the models of `catalogue` (the first is the default) as `options` says.
  // Health reports SERVING once this returns. Fails if an address cannot be bound or
  // the session store cannot be opened.
  static absl::StatusOr<std::unique_ptr<AttnServer>> Start(
      const config::ServerOptions& options,
      std::unique_ptr<catalogue::ModelCatalogue> catalogue);

  // Shutdown(0) unless already shut down.
  ~AttnServer();

  int port() const { return port_; }
  // The bound port of the HTTP front; 0 when --http_listen is empty.
  int http_port() const { return http_ ? http_->port() : 0; }
  // The HTTP front (null when --http_listen is empty).
  http::HttpFront* http() const { return http_.get(); }
  int metrics_port() const { return metrics_->port(); }
  // The API keys from --api_keys_file (none: one tenant).
  const ApiKeys& api_keys() const { return api_keys_; }

  // Drain: health goes NOT_SERVING (HTTP /health 503); new sessions and turns are
  // refused with UNAVAILABLE (HTTP 503 with retry-after); running turns get `grace` to finish; turns still running then stop at
  // a consistent position with a final message (FINISH_REASON_SHUTDOWN); every session
  // is written to the durable store (if any); then the server stops.
  void Shutdown(absl::Duration grace);

 private:
  AttnServer() = default;
  void Housekeeping();
  // The tenants of the keys file, or the one default tenant without keys.
  std::vector<std::string> Tenants() const;

  config::ServerOptions options_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<catalogue::ModelCatalogue> models_;
  std::unique_ptr<session::SessionStore> store_;
  std::unique_ptr<scheduler::Scheduler> scheduler_;
  std::unique_ptr<BlockingPool> pool_;  // outlives every call: reset after server_ stops
  ApiKeys api_keys_;                    // read by service_
  std::unique_ptr<AttnServeService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<store::CheckpointStore> checkpoints_;  // stored responses; outlives http_
  std::unique_ptr<store::CheckpointStore> prefix_states_;  // kept chat states; outlives http_
  std::unique_ptr<http::ConversationStore> conversations_;  // outlives http_
  std::unique_ptr<http::HttpFront> http_;  // stopped before the scheduler goes

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;  // guarded by mu_
  std::thread housekeeping_;
};

}  // namespace attnserve::service
