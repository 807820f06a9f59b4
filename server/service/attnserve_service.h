// The gRPC service: callback handlers that resolve the caller, parse, validate and hand
// work to the session store and the scheduler. They never block and never touch tensors:
// work that may wait (on the store, a lease, another turn) runs on the blocking pool.
#pragma once

#include <functional>
#include <memory>

#include "attnserve/v1/attnserve.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/service/admission.h"
#include "server/service/api_keys.h"
#include "server/service/blocking_pool.h"
#include "server/service/convert.h"
#include "server/session/session_store.h"

namespace attnserve::service {

// Who makes a call, resolved once per call from its metadata before any handler body
// runs, and passed to the session store as a value.
struct Caller {
  // The tenant its API key maps to (kDefaultTenant without API keys).
  std::string tenant;
};

class AttnServeService final : public v1::AttnServe::CallbackService {
 public:
  // All pointers are not owned and must outlive the service; metrics may be null.
  // `pool` runs the handler work that may wait on a durable session store; it must
  // outlive every call (destroy it after the gRPC server has shut down). `keys` null or
  // empty: one tenant, no authentication.
  AttnServeService(const catalogue::ModelCatalogue* models, session::SessionStore* store,
                   scheduler::Scheduler* scheduler, metrics::Metrics* metrics,
                   RequestLimits limits, BlockingPool* pool, const ApiKeys* keys = nullptr);

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* context, const v1::GenerateRequest* request) override;
  grpc::ServerUnaryReactor* CreateSession(grpc::CallbackServerContext* context,
                                          const v1::CreateSessionRequest* request,
                                          v1::Session* response) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::Session* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerWriteReactor<v1::SnapshotChunk>* ExportSession(
      grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) override;
  grpc::ServerReadReactor<v1::ImportSessionRequest>* ImportSession(
      grpc::CallbackServerContext* context, v1::Session* response) override;
  grpc::ServerUnaryReactor* ForkSession(grpc::CallbackServerContext* context,
                                        const v1::ForkSessionRequest* request,
                                        v1::Session* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* DescribeModel(grpc::CallbackServerContext* context,
                                          const v1::DescribeModelRequest* request,
                                          v1::ModelInfo* response) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;

  // Counts one finished request (requests_total) by method, status and model.
  void Record(const char* method, const grpc::Status& status,
              const catalogue::ServedModel* model) const;

  // Runs `work` on the blocking pool, off gRPC's callback threads: it may wait on the
  // session store, a store lease, or a session's previous turn. False (work not run)
  // when the pool is full.
  bool RunBlocking(std::function<void()> work);

  // The caller of `context`: its tenant (ApiKeys::Authenticate; UNAUTHENTICATED), once
  // the session-id routing hint in its metadata (x-session-id) agrees with the session
  // the request names, `session_id` (empty: none; INVALID_ARGUMENT otherwise). Every
  // handler calls it first.
  absl::StatusOr<Caller> ResolveCaller(const grpc::CallbackServerContext* context,
                                       const std::string& session_id) const;

 private:
  friend class GenerateReactor;
  // The work of a unary call that may touch the store, for `caller`: returns the call's
  // status and sets `model` (for metrics) when it resolved one.
  using UnaryWork =
      std::function<absl::Status(const Caller& caller, const catalogue::ServedModel** model)>;
  // Starts the call's reactor, resolves the caller (about `session_id`, empty: none) and
  // finishes the call with what `work` returns, run through RunBlocking
  // (RESOURCE_EXHAUSTED if the pool is full).
  grpc::ServerUnaryReactor* Defer(grpc::CallbackServerContext* context, const char* method,
                                  const std::string& session_id, UnaryWork work);
  // Finishes a unary call with `status`, counting it.
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status,
                                  const catalogue::ServedModel* model = nullptr);

  const catalogue::ModelCatalogue* models_;
  session::SessionStore* store_;
  scheduler::Scheduler* scheduler_;
  metrics::Metrics* metrics_;
  const RequestLimits limits_;
  BlockingPool* const pool_;
  const ApiKeys no_keys_;
  const ApiKeys* const keys_;
};

}  // namespace attnserve::service
