#include "server/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"

namespace attnserve::service {

absl::StatusOr<std::vector<std::shared_ptr<const session::ServedModel>>> LoadModels(
    const std::vector<std::string>& dirs) {
  std::vector<std::shared_ptr<const session::ServedModel>> out;
  std::set<std::string> names;
  for (const std::string& dir : dirs) {
    auto model = model::Model::Load(dir);
    if (!model.ok()) return model.status();
    const std::string name = (*model)->config().name;
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model_dirs: two models are named '", name, "' (", dir, ")"));
    }
    auto served = std::make_shared<session::ServedModel>(
        session::ServedModel{name, dir, std::shared_ptr<const model::Model>(std::move(*model)), {}});
    // Offer every other module and order the weights may be served with
    // (attention::CheckServableAs decides; e.g. a qk_norm softmax checkpoint as taylor)
    // whose state fits the per-layer budget. Refusals cost a config read, no weights.
    const attention::AttentionOptions& a = served->model->config().attention;
    for (const char* module : {"taylor", "taylor_norm"}) {
      for (int order : {2, 4, 6}) {
        if (module == a.module && order == a.order) continue;  // the model itself
        auto variant = model::Model::Load(dir, {module, order});
        if (!variant.ok()) continue;  // not servable this way, or over the budget
        served->variants.push_back(std::make_shared<session::ServedModel>(session::ServedModel{
            name, dir, std::shared_ptr<const model::Model>(std::move(*variant)), {}}));
      }
    }
    out.push_back(std::move(served));
  }
  if (out.empty()) return absl::InvalidArgumentError("model_dirs: no model to serve");
  return out;
}

absl::StatusOr<std::unique_ptr<AttnServer>> AttnServer::Start(
    const config::ServerOptions& options,
    std::vector<std::shared_ptr<const session::ServedModel>> models) {
  if (models.empty()) return absl::InvalidArgumentError("no model to serve");
  std::unique_ptr<AttnServer> s(new AttnServer);
  s->options_ = options;
  auto metrics = metrics::Metrics::Create(options.metrics_address);
  if (!metrics.ok()) return metrics.status();
  s->metrics_ = std::move(metrics).value();
  for (const auto& m : models) s->metrics_->ForModel(m->name, m->attention());
  s->models_ = std::make_unique<ModelSet>(std::move(models));

  session::SessionStore::Options store;
  store.max_sessions = options.max_sessions;
  store.memory_budget_bytes = options.memory_budget_bytes;
  store.default_ttl = options.default_ttl;
  store.max_ttl = options.max_ttl;
  s->store_ = std::make_unique<session::SessionStore>(store);

  scheduler::Scheduler::Options sched;
  sched.threads = options.threads;
  sched.store = s->store_.get();
  sched.metrics = s->metrics_.get();
  s->scheduler_ = std::make_unique<scheduler::Scheduler>(sched);

  RequestLimits limits;
  limits.max_prompt_tokens = options.max_prompt_tokens;
  limits.max_generated_tokens = options.max_generated_tokens;
  limits.default_max_tokens = options.default_max_tokens;
  s->service_ = std::make_unique<AttnServeService>(s->models_.get(), s->store_.get(),
                                                   s->scheduler_.get(), s->metrics_.get(),
                                                   limits);

  grpc::EnableDefaultHealthCheckService(true);
  // gRPC's built-in health service carries no protobuf descriptors; touching ours puts
  // grpc.health.v1 in the descriptor pool so reflection can describe it to tools.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.RegisterService(s->service_.get());
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (address in use or not valid for this machine?)"));
  }
  s->server_->GetHealthCheckService()->SetServingStatus(true);
  s->housekeeping_ = std::thread([raw = s.get()] { raw->Housekeeping(); });
  return s;
}

AttnServer::~AttnServer() { Shutdown(absl::ZeroDuration()); }

void AttnServer::Shutdown(absl::Duration grace) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (server_) server_->GetHealthCheckService()->SetServingStatus(false);
  if (scheduler_) {
    scheduler_->StopAccepting();
    scheduler_->WaitIdle(grace);
  }
  // Calls still open after the grace period are cancelled; their turns stop at the
  // engine's next step.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  if (housekeeping_.joinable()) housekeeping_.join();
  scheduler_.reset();
}

void AttnServer::Housekeeping() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    store_->ExpireIdle();
    // Per-model session gauges, zero for models with no session.
    std::map<const session::ServedModel*, std::pair<int, int64_t>> totals;
    for (const auto& m : models_->all()) totals[m.get()] = {0, 0};
    std::map<std::string, const session::ServedModel*> by_name;
    for (const auto& m : models_->all()) by_name[m->name] = m.get();
    for (const auto& info : store_->List()) {
      auto& t = totals[by_name[info.model]];
      t.first += 1;
      t.second += info.state_bytes;
    }
    for (const auto& [m, t] : totals) {
      if (m == nullptr) continue;
      metrics::ModelMetrics& mm = metrics_->ForModel(m->name, m->attention());
      mm.SetActiveSessions(t.first);
      mm.SetSessionStateBytes(t.second);
    }
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; });
  }
}

}  // namespace attnserve::service
