#include "server/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "server/service/record_stores.h"
#include "server/service/tls_credentials.h"
#include "server/store/memory_store.h"
#include "server/store/record_kind.h"
#include "server/store/snapshot_store.h"

namespace attnserve::service {

absl::StatusOr<std::unique_ptr<AttnServer>> AttnServer::Start(
    const config::ServerOptions& options, std::unique_ptr<catalogue::ModelCatalogue> catalogue) {
  if (catalogue == nullptr || catalogue->all().empty()) {
    return absl::InvalidArgumentError("no model to serve");
  }
  // First: a bad certificate file fails before any port is bound.
  auto credentials = ServerCredentialsFor(options);
  if (!credentials.ok()) return credentials.status();
  std::unique_ptr<AttnServer> s(new AttnServer);
  s->options_ = options;
  auto metrics = metrics::Metrics::Create(options.metrics_address);
  if (!metrics.ok()) return metrics.status();
  s->metrics_ = std::move(metrics).value();
  for (const auto& m : catalogue->all()) {
    s->metrics_->ForModel(m->name, m->attention());
    for (const auto& v : m->variants) s->metrics_->ForModel(v->name, v->attention());
  }
  s->models_ = std::move(catalogue);
  if (!options.api_keys_file.empty()) {
    auto keys = ApiKeys::Load(options.api_keys_file);
    if (!keys.ok()) {
      return absl::Status(keys.status().code(),
                          absl::StrCat("--api_keys_file: ", keys.status().message()));
    }
    s->api_keys_ = *std::move(keys);
  }

  session::SessionStore::Options store;
  store.max_sessions = options.max_sessions;
  store.memory_budget_bytes = options.memory_budget_bytes;
  store.default_ttl = options.default_ttl;
  store.max_ttl = options.max_ttl;
  store.catalogue = s->models_.get();
  store.metrics = s->metrics_.get();
  store.tenant_limits = s->api_keys_.limits();
  for (const std::string& tenant : s->Tenants()) s->metrics_->SetTenantUsage(tenant, 0, 0);
  if (options.session_store != "memory") {
    auto durable = store::OpenSnapshotStore(options.session_store);
    if (!durable.ok()) return durable.status();
    store.durable = std::move(durable).value();
  }
  store.page_target_bytes = options.state_page_bytes;
  store.persist =
      options.persist_each_turn ? session::PersistMode::kEachTurn : session::PersistMode::kNone;
  store.spill_after = options.spill_after;
  store.leases.ttl = options.lease_ttl;
  store.leases.wait = options.lease_wait;
  auto session_store = session::SessionStore::Create(std::move(store));
  if (!session_store.ok()) return session_store.status();
  s->store_ = std::move(session_store).value();

  scheduler::Scheduler::Options sched;
  sched.threads = options.threads;
  sched.prefill_chunk_tokens = options.prefill_chunk_tokens;
  sched.prefill_tokens_per_step = options.prefill_tokens_per_step;
  sched.stream_idle_timeout = options.stream_idle_timeout;
  sched.store = s->store_.get();
  sched.metrics = s->metrics_.get();
  s->scheduler_ = std::make_unique<scheduler::Scheduler>(sched);

  RequestLimits limits;
  limits.max_prompt_tokens = options.max_prompt_tokens;
  limits.max_generated_tokens = options.max_generated_tokens;
  limits.default_max_tokens = options.default_max_tokens;
  limits.max_stop_strings = options.max_stop_strings;
  limits.max_stop_bytes = options.max_stop_bytes;
  // Four threads: store operations are short (loopback Redis, local files); the queue
  // bound turns a stuck store into RESOURCE_EXHAUSTED rather than unbounded memory.
  s->pool_ = std::make_unique<BlockingPool>(4, 1024);
  s->service_ = std::make_unique<AttnServeService>(s->models_.get(), s->store_.get(),
                                                   s->scheduler_.get(), s->metrics_.get(),
                                                   limits, s->pool_.get(), &s->api_keys_);

  grpc::EnableDefaultHealthCheckService(true);
  // gRPC's built-in health service carries no protobuf descriptors; touching ours puts
  // grpc.health.v1 in the descriptor pool so reflection can describe it to tools.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen_address, *credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.SetMaxReceiveMessageSize(MaxRequestMessageBytes(limits));
  // Dead clients (a peer gone without closing) are found by keepalive pings: their
  // streams end and their sessions are released. Clients may ping every 10 s or less
  // often (attnserve_client does not ping); idle connections close after 30 min.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             int(absl::ToInt64Milliseconds(options.keepalive)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, 30 * 60 * 1000);
  s->server_ = builder.BuildAndStart();
  if (!s->server_ || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen_address,
                     " (address in use or not valid for this machine?)"));
  }
  if (!options.http_listen.empty()) {
    http::HttpFrontOptions http_options;
    http_options.listen = options.http_listen;
    http_options.max_streams = options.http_max_streams;
    http_options.threads = options.http_threads > 0
                               ? options.http_threads
                               : options.http_max_streams + config::defaults::kHttpSpareThreads;
    http_options.write_timeout = options.stream_idle_timeout;
    http::ConnectionLimits& connections = http_options.connections;
    connections.max_connections =
        options.http_max_connections > 0
            ? options.http_max_connections
            : std::max(1, http_options.threads - config::defaults::kHttpReservedThreads);
    // Half, so one address cannot hold every connection; a small server's whole (a
    // client of it may well need all of its few).
    connections.max_per_peer =
        options.http_max_connections_per_peer > 0
            ? options.http_max_connections_per_peer
            : std::max(connections.max_connections / 2, std::min(connections.max_connections, 8));
    connections.request_timeout = options.http_request_timeout;
    connections.write_timeout = options.stream_idle_timeout;
    http_options.response_ttl = options.response_ttl;
    http_options.prefix_ttl = options.default_ttl;
    http_options.web_dir = options.web_dir;
    http_options.tls_cert = options.tls_cert;
    http_options.tls_key = options.tls_key;
    http_options.tls_client_ca = options.tls_client_ca;
    http::HttpFrontDeps deps;
    deps.models = s->models_.get();
    deps.store = s->store_.get();
    deps.scheduler = s->scheduler_.get();
    deps.metrics = s->metrics_.get();
    deps.keys = &s->api_keys_;
    deps.limits = limits;
    auto records = OpenRecordStores(options);
    if (!records.ok()) return records.status();
    s->checkpoints_ = std::move(records->responses);
    s->prefix_states_ = std::move(records->prefix_states);
    deps.checkpoints = s->checkpoints_.get();
    deps.prefix_states = s->prefix_states_.get();
    http::ConversationStore::Options conversation_options;
    conversation_options.ttl = options.conversation_ttl;
    conversation_options.max_per_tenant = options.max_conversations_per_tenant;
    conversation_options.memory_bytes = options.conversation_memory_bytes;
    conversation_options.responses = http::CheckpointResponses(s->checkpoints_.get());
    if (options.session_store == "memory") {
      s->conversations_ = http::ConversationStore::InMemory(std::move(conversation_options));
    } else {
      auto durable = store::OpenSnapshotStore(options.session_store);
      if (!durable.ok()) return durable.status();
      s->conversations_ = std::make_unique<http::ConversationStore>(
          store::ForKinds({store::RecordKind::kConversation, store::RecordKind::kConversationList},
                          *std::move(durable)),
          std::move(conversation_options));
    }
    deps.conversations = s->conversations_.get();
    auto front = http::HttpFront::Start(std::move(http_options), deps);
    if (!front.ok()) return front.status();
    s->http_ = *std::move(front);
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
  if (http_) http_->StartDraining();
  if (store_) store_->StopAccepting();
  if (scheduler_) {
    scheduler_->StopAccepting();
    if (!scheduler_->WaitIdle(grace)) {
      // Past the grace: stop what still runs where it stands, with a final message.
      scheduler_->StopTurns();
      scheduler_->WaitIdle(absl::Seconds(5));
    }
  }
  if (housekeeping_.joinable()) housekeeping_.join();
  if (store_ && store_->durable()) {
    const absl::Time start = absl::Now();
    const int in_memory = store_->size();
    auto saved = store_->SaveAll(absl::Seconds(10));
    if (saved.ok()) {
      std::fprintf(stderr, "attnserve: drain: saved %d sessions to %s in %.1f ms\n", *saved,
                   store_->store_name().c_str(), absl::ToDoubleMilliseconds(absl::Now() - start));
    } else {
      std::fprintf(stderr, "attnserve: drain: saving %d sessions to %s failed: %s\n",
                   in_memory, store_->store_name().c_str(),
                   std::string(saved.status().message()).c_str());
    }
  }
  // Final messages are written by now or in flight; calls still open after this are
  // cancelled.
  if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  // Every turn has ended, so every stream's last event is written or its client gone.
  if (http_) http_->Stop();
  http_.reset();
  pool_.reset();  // runs what is still queued while the service exists
  scheduler_.reset();
}

void PublishSessionGauges(const catalogue::ModelCatalogue& models,
                          const std::vector<session::SessionInfo>& sessions,
                          metrics::Metrics& metrics) {
  // Keyed by the metrics' labels (model, attention module): a variant's sessions count
  // under its own module, and every model and variant drops back to zero.
  std::map<std::pair<std::string, std::string>, std::pair<int, int64_t>> totals;
  for (const auto& m : models.all()) {
    totals[{m->name, m->attention()}] = {0, 0};
    for (const auto& v : m->variants) totals[{v->name, v->attention()}] = {0, 0};
  }
  for (const auto& info : sessions) {
    auto& t = totals[{info.served->name, info.served->attention()}];
    t.first += 1;
    t.second += info.state_bytes;
  }
  for (const auto& [labels, t] : totals) {
    metrics::ModelMetrics& mm = metrics.ForModel(labels.first, labels.second);
    mm.SetActiveSessions(t.first);
    mm.SetSessionStateBytes(t.second);
  }
}

std::vector<std::string> AttnServer::Tenants() const {
  if (!api_keys_.enabled()) return {attnserve::kDefaultTenant};
  std::vector<std::string> out;
  for (const auto& [tenant, limits] : api_keys_.limits()) out.push_back(tenant);
  return out;
}

void AttnServer::Housekeeping() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    store_->ExpireIdle();
    store_->SpillIdle();
    const std::vector<session::SessionInfo> sessions = store_->ListAll();
    PublishSessionGauges(*models_, sessions, *metrics_);
    // Per-tenant gauges, zero for tenants with no session.
    std::map<std::string, std::pair<int, int64_t>> tenants;
    for (const std::string& tenant : Tenants()) tenants[tenant] = {0, 0};
    for (const auto& info : sessions) {
      auto it = tenants.find(info.owner);
      if (it == tenants.end()) continue;  // a session of no configured tenant
      it->second.first += 1;
      it->second.second += info.state_bytes;
    }
    for (const auto& [tenant, t] : tenants) metrics_->SetTenantUsage(tenant, t.first, t.second);
    lock.lock();
    cv_.wait_for(lock, std::chrono::milliseconds(500), [this] { return stopping_; });
  }
}

}  // namespace attnserve::service
