#include "server/service/attnserve_service.h"

#include "absl/strings/str_cat.h"
#include "server/common/excerpt.h"
#include "server/service/convert.h"
#include "server/service/generate_reactor.h"
#include "server/service/session_transfer.h"
#include "server/service/status_map.h"

namespace attnserve::service {

AttnServeService::AttnServeService(const catalogue::ModelCatalogue* models, session::SessionStore* store,
                                   scheduler::Scheduler* scheduler,
                                   metrics::Metrics* metrics, RequestLimits limits,
                                   BlockingPool* pool, const ApiKeys* keys)
    : models_(models),
      store_(store),
      scheduler_(scheduler),
      metrics_(metrics),
      limits_(limits),
      pool_(pool),
      keys_(keys != nullptr ? keys : &no_keys_) {}

absl::StatusOr<Caller> AttnServeService::ResolveCaller(
    const grpc::CallbackServerContext* context, const std::string& session_id) const {
  auto tenant = keys_->Authenticate(context->client_metadata());
  if (!tenant.ok()) return tenant.status();
  if (absl::Status s = CheckSessionMetadata(context->client_metadata(), session_id); !s.ok()) {
    return s;
  }
  return Caller{*std::move(tenant)};
}

bool AttnServeService::RunBlocking(std::function<void()> work) {
  return pool_->Run(std::move(work));
}

grpc::ServerUnaryReactor* AttnServeService::Defer(grpc::CallbackServerContext* context,
                                                  const char* method,
                                                  const std::string& session_id,
                                                  UnaryWork work) {
  auto caller = ResolveCaller(context, session_id);
  if (!caller.ok()) return Reply(context, method, caller.status());
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto run = [this, reactor, method, caller = *std::move(caller), work = std::move(work)] {
    const catalogue::ServedModel* model = nullptr;
    const grpc::Status g = ToGrpcStatus(work(caller, &model));
    Record(method, g, model);
    reactor->Finish(g);
  };
  if (!RunBlocking(std::move(run))) {
    const grpc::Status g(grpc::StatusCode::RESOURCE_EXHAUSTED,
                         "server busy: too many requests are waiting for the session store");
    Record(method, g, nullptr);
    reactor->Finish(g);
  }
  return reactor;
}

void AttnServeService::Record(const char* method, const grpc::Status& status,
                              const catalogue::ServedModel* model) const {
  if (metrics_ == nullptr) return;
  metrics_->RecordRequest(method, GrpcCodeName(status.error_code()),
                          model ? model->name : "", model ? model->attention() : "");
}

grpc::ServerUnaryReactor* AttnServeService::Reply(grpc::CallbackServerContext* context,
                                                  const char* method,
                                                  const absl::Status& status,
                                                  const catalogue::ServedModel* model) {
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
  return Defer(context, "CreateSession", "", [=](const Caller& caller,
                                                 const catalogue::ServedModel** model) {
    auto served = models_->Resolve(request->model(), request->attention_module(),
                                   request->attention_order());
    if (!served.ok()) return served.status();
    *model = served->get();
    if (request->ttl_seconds() < 0) {
      return absl::InvalidArgumentError("ttl_seconds must be >= 0 (0 = default)");
    }
    // With a durable store, admission may spill idle sessions to make room.
    auto session = store_->Create(caller.tenant, *served, absl::Seconds(request->ttl_seconds()));
    if (!session.ok()) return session.status();
    auto info = store_->Get(caller.tenant, (*session)->id());
    if (info.ok()) *response = ToProto(*info);
    return info.status();
  });
}

grpc::ServerUnaryReactor* AttnServeService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::Session* response) {
  return Defer(context, "GetSession", request->session_id(),
               [=](const Caller& caller, const catalogue::ServedModel**) {
    auto info = store_->Get(caller.tenant, request->session_id());  // loads a spilled one
    if (info.ok()) *response = ToProto(*info);
    return info.status();
  });
}

grpc::ServerUnaryReactor* AttnServeService::CloseSession(
    grpc::CallbackServerContext* context, const v1::CloseSessionRequest* request,
    v1::CloseSessionResponse*) {
  return Defer(context, "CloseSession", request->session_id(),
               [=](const Caller& caller, const catalogue::ServedModel**) {
    absl::Status s = store_->Close(caller.tenant, request->session_id());
    if (s.ok()) scheduler_->Wake();  // a running turn on it stops at the next step
    return s;
  });
}

grpc::ServerUnaryReactor* AttnServeService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest*,
                                                         v1::ListSessionsResponse* response) {
  auto caller = ResolveCaller(context, "");
  if (!caller.ok()) return Reply(context, "ListSessions", caller.status());
  for (const auto& info : store_->List(caller->tenant)) *response->add_sessions() = ToProto(info);
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
  return Defer(context, "ForkSession", request->session_id(),
               [=](const Caller& caller, const catalogue::ServedModel** model) {
    if (request->ttl_seconds() < 0) {
      return absl::InvalidArgumentError("ttl_seconds must be >= 0 (0 = the original's)");
    }
    auto fork = store_->Fork(caller.tenant, request->session_id(),
                             absl::Seconds(request->ttl_seconds()));
    if (!fork.ok()) return fork.status();
    *model = &(*fork)->served();
    auto info = store_->Get(caller.tenant, (*fork)->id());
    if (info.ok()) *response = ToProto(*info);
    return info.status();
  });
}

grpc::ServerUnaryReactor* AttnServeService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  if (auto caller = ResolveCaller(context, ""); !caller.ok()) {
    return Reply(context, "ListModels", caller.status());
  }
  for (const auto& m : models_->all()) *response->add_models() = ToProto(*m);
  return Reply(context, "ListModels", absl::OkStatus());
}

grpc::ServerUnaryReactor* AttnServeService::DescribeModel(
    grpc::CallbackServerContext* context, const v1::DescribeModelRequest* request,
    v1::ModelInfo* response) {
  if (auto caller = ResolveCaller(context, ""); !caller.ok()) {
    return Reply(context, "DescribeModel", caller.status());
  }
  auto model = models_->Find(request->name());
  if (model.ok()) *response = ToProto(**model);
  return Reply(context, "DescribeModel", model.status(), model.ok() ? model->get() : nullptr);
}

grpc::ServerUnaryReactor* AttnServeService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  if (request->text().size() > size_t(limits_.max_prompt_tokens)) {
    return Reply(context, "Tokenize",
                 absl::InvalidArgumentError(absl::StrCat(
                     "text: ", request->text().size(), " bytes is over the server's limit of ",
                     limits_.max_prompt_tokens, " prompt tokens")));
  }
  if (request->session_id().empty()) {
    if (auto caller = ResolveCaller(context, ""); !caller.ok()) {
      return Reply(context, "Tokenize", caller.status());
    }
    auto model = models_->Find(request->model());
    if (!model.ok()) return Reply(context, "Tokenize", model.status());
    auto tokens = TokenizeText(**model, /*position=*/0, request->text());
    if (tokens.ok()) *response = *std::move(tokens);
    return Reply(context, "Tokenize", tokens.status(), model->get());
  }
  // The session may have to be loaded from the store: off the callback thread.
  return Defer(context, "Tokenize", request->session_id(),
               [=](const Caller& caller, const catalogue::ServedModel** model) {
    auto info = store_->Get(caller.tenant, request->session_id());
    if (!info.ok()) return info.status();
    *model = info->served;
    if (!request->model().empty() && request->model() != info->model) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model: session '", info->id, "' runs model '", info->model, "', not '",
          Excerpt(request->model()), "'"));
    }
    auto tokens = TokenizeText(*info->served, info->position, request->text());
    if (tokens.ok()) *response = *std::move(tokens);
    return tokens.status();
  });
}

}  // namespace attnserve::service
