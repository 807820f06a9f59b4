// The gRPC service: callback handlers that parse, validate and hand work to the session
// store and the scheduler. They never block and never touch tensors.
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

class AttnServeService final : public v1::AttnServe::CallbackService {
 public:
  // All pointers are not owned and must outlive the service; metrics may be null.
  // `pool` runs the handler work that may wait on a durable session store; it must
  // outlive every call (destroy it after the gRPC server has shut down). `keys` null or
  // empty: one tenant, no authentication.
  AttnServeService(const session::ModelCatalogue* models, session::SessionStore* store,
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

  // Counts one finished request (requests_total) by method, status and model.
  void Record(const char* method, const grpc::Status& status,
              const session::ServedModel* model) const;

  // Runs `work` where it may block on the session store: on the blocking pool when the
  // store is durable, inline otherwise. False (work not run) when the pool is full.
  bool RunBlocking(std::function<void()> work);

  // The calling tenant (ApiKeys::Authenticate on the call's metadata).
  absl::StatusOr<std::string> Authenticate(const grpc::CallbackServerContext* context) const;

 private:
  friend class GenerateReactor;
  // The work of a unary call that may touch the store: returns the call's status and
  // sets `model` (for metrics) when it resolved one.
  using UnaryWork = std::function<absl::Status(const session::ServedModel** model)>;
  // Starts the call's reactor and finishes it with what `work` returns, run through
  // RunBlocking (RESOURCE_EXHAUSTED if the pool is full).
  grpc::ServerUnaryReactor* Defer(grpc::CallbackServerContext* context, const char* method,
                                  UnaryWork work);
  // Finishes a unary call with `status`, counting it.
  grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const char* method,
                                  const absl::Status& status,
                                  const session::ServedModel* model = nullptr);

  const session::ModelCatalogue* models_;
  session::SessionStore* store_;
  scheduler::Scheduler* scheduler_;
  metrics::Metrics* metrics_;
  const RequestLimits limits_;
  BlockingPool* const pool_;
  const ApiKeys no_keys_;
  const ApiKeys* const keys_;
};

}  // namespace attnserve::service
