#include "server/service/attnserve_service.h"

#include "server/service/generate_reactor.h"
#include "server/service/session_transfer.h"
#include "server/service/status_map.h"

namespace attnserve::service {

AttnServeService::AttnServeService(const session::ModelCatalogue* models, session::SessionStore* store,
                                   scheduler::Scheduler* scheduler,
                                   metrics::Metrics* metrics, RequestLimits limits)
    : models_(models),
      store_(store),
      scheduler_(scheduler),
      metrics_(metrics),
      limits_(limits) {}

void AttnServeService::Record(const char* method, const grpc::Status& status,
                              const session::ServedModel* model) const {
  if (metrics_ == nullptr) return;
  metrics_->RecordRequest(method, GrpcCodeName(status.error_code()),
                          model ? model->name : "", model ? model->attention() : "");
}

grpc::ServerUnaryReactor* AttnServeService::Reply(grpc::CallbackServerContext* context,
                                                  const char* method,
                                                  const absl::Status& status,
                                                  const session::ServedModel* model) {
  const grpc::Status g = ToGrpcStatus(status);
  Record(method, g, model);
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(g);
  return reactor;
}

grpc::ServerWriteReactor<v1::GenerateResponse>* AttnServeService::Generate(
    grpc::CallbackServerContext* context, const v1::GenerateRequest* request) {
  return StartGenerate(this, models_, store_, scheduler_, limits_, context, request);
}

grpc::ServerUnaryReactor* AttnServeService::CreateSession(
    grpc::CallbackServerContext* context, const v1::CreateSessionRequest* request,
    v1::Session* response) {
  auto served = models_->Resolve(request->model(), request->attention_module(),
                                 request->attention_order());
  if (!served.ok()) return Reply(context, "CreateSession", served.status());
  const session::ServedModel& m = **served;
  if (request->ttl_seconds() < 0) {
    return Reply(context, "CreateSession",
                 absl::InvalidArgumentError("ttl_seconds must be >= 0 (0 = default)"), &m);
  }
  auto session = store_->Create(*served, absl::Seconds(request->ttl_seconds()));
  if (!session.ok()) return Reply(context, "CreateSession", session.status(), &m);
  auto info = store_->Get((*session)->id());
  if (info.ok()) *response = ToProto(*info);
  return Reply(context, "CreateSession", info.status(), &m);
}

grpc::ServerUnaryReactor* AttnServeService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  auto info = store_->Get(request->session_id());
  if (info.ok()) *response = ToProto(*info);
  return Reply(context, "GetSession", info.status());
}

grpc::ServerUnaryReactor* AttnServeService::CloseSession(
    grpc::CallbackServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse*) {
  absl::Status s = store_->Close(request->session_id());
  if (s.ok()) scheduler_->Wake();  // a running turn on it stops at the next step
  return Reply(context, "CloseSession", s);
}

grpc::ServerUnaryReactor* AttnServeService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest*,
                                                         v1::ListSessionsResponse* response) {
  for (const auto& info : store_->List()) *response->add_sessions() = ToProto(info);
  return Reply(context, "ListSessions", absl::OkStatus());
}

grpc::ServerWriteReactor<v1::SnapshotChunk>* AttnServeService::ExportSession(
    grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) {
  return StartExport(this, store_, context, request);
}

grpc::ServerReadReactor<v1::ImportSessionRequest>* AttnServeService::ImportSession(
    grpc::CallbackServerContext* context, v1::Session* response) {
  return StartImport(this, store_, context, response);
}

grpc::ServerUnaryReactor* AttnServeService::ForkSession(grpc::CallbackServerContext* context,
                                                        const v1::ForkSessionRequest* request,
                                                        v1::Session* response) {
  if (request->ttl_seconds() < 0) {
    return Reply(context, "ForkSession",
                 absl::InvalidArgumentError("ttl_seconds must be >= 0 (0 = the original's)"));
  }
  auto fork = store_->Fork(request->session_id(), absl::Seconds(request->ttl_seconds()));
  if (!fork.ok()) return Reply(context, "ForkSession", fork.status());
  auto info = store_->Get((*fork)->id());
  if (info.ok()) *response = ToProto(*info);
  return Reply(context, "ForkSession", info.status(), &(*fork)->served());
}

grpc::ServerUnaryReactor* AttnServeService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  for (const auto& m : models_->all()) *response->add_models() = ToProto(*m);
  return Reply(context, "ListModels", absl::OkStatus());
}

grpc::ServerUnaryReactor* AttnServeService::DescribeModel(
    grpc::CallbackServerContext* context, const v1::DescribeModelRequest* request,
    v1::ModelInfo* response) {
  auto model = models_->Find(request->name());
  if (model.ok()) *response = ToProto(**model);
  return Reply(context, "DescribeModel", model.status(), model.ok() ? model->get() : nullptr);
}

}  // namespace attnserve::service
