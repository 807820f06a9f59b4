// attnserve_server: serves the models in --model_dirs (default: the shipped default
// model) over gRPC, with Prometheus metrics on their own port. SIGTERM/SIGINT drain it:
// health goes NOT_SERVING, new sessions and turns are refused, running turns get
// --shutdown_grace to finish and are then stopped with a final message, every session
// is written to the durable --session_store, then the process exits 0.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <iostream>

#include "absl/strings/str_join.h"
#include "server/attention/options.h"
#include "server/config/listen_policy.h"
#include "server/config/server_options.h"
#include "server/service/server.h"

namespace {

// How clients reach the gRPC port, for the start-up line.
std::string TransportDescription(const attnserve::config::ServerOptions& options) {
  if (!options.tls_client_ca.empty()) {
    return "mutual TLS (client certificates signed by " + options.tls_client_ca + ")";
  }
  if (attnserve::config::TlsConfigured(options)) return "TLS";
  if (attnserve::config::IsLoopbackAddress(options.listen_address)) return "plaintext on loopback";
  return options.insecure ? "plaintext (--insecure)" : "plaintext";
}

// Who may call, for the start-up line.
std::string TenancyDescription(const attnserve::service::ApiKeys& keys,
                               const std::string& file) {
  if (!keys.enabled()) {
    return "one tenant, no API keys (no --api_keys_file): every caller sees every session";
  }
  return std::to_string(keys.tenant_count()) + " tenants, " +
         std::to_string(keys.key_count()) + " API keys from " + file +
         " (calls need 'authorization: Bearer KEY')";
}

}  // namespace

int main(int argc, char** argv) {
  // Block the shutdown signals in every thread (threads inherit the mask); the main
  // thread takes them with sigwait below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  bool help = false;
  auto options = attnserve::config::ParseServerOptions(argc, argv, attnserve::config::GetEnv,
                                                       &help);
  if (help) {
    std::cout << attnserve::config::ServerUsage(argv[0]) << "\n"
              << "With no --model_dirs the server loads " << ATTNSERVE_DEFAULT_MODEL_DIR
              << ".\n";
    return 0;
  }
  if (!options.ok()) {
    std::cerr << "attnserve_server: " << options.status().message() << "\n";
    return 2;
  }
  if (absl::Status status = attnserve::config::CheckListenSecurity(*options); !status.ok()) {
    std::cerr << "attnserve_server: " << status.message() << "\n";
    return 2;
  }
  if (options->model_dirs.empty()) options->model_dirs = {ATTNSERVE_DEFAULT_MODEL_DIR};
  attnserve::model::LoadOptions load;
  load.weights_bf16 = options->weights_bf16;
  load.state_bf16 = options->state_bf16;
  if (absl::Status s = attnserve::attention::ParseKvCacheType(options->kv_cache_type,
                                                               &load.kv_cache_type);
      !s.ok()) {
    std::cerr << "attnserve_server: " << s.message() << "\n";
    return 2;
  }
  load.quantize = options->quantize;
  auto models = attnserve::catalogue::ModelCatalogue::Load(options->model_dirs, load);
  if (!models.ok()) {
    std::cerr << "attnserve_server: " << models.status().message() << "\n";
    return 1;
  }
  std::vector<std::string> names;
  for (const auto& m : (*models)->all()) {
    names.push_back(m->name + " (" + m->attention() + ", " +
                    std::to_string(m->model->ParameterCount()) + " parameters, " +
                    std::to_string(m->model->WeightBytes() >> 20) + " MiB of weights (" +
                    m->model->WeightTypes() + ")" +
                    (m->model->UsesBf16Weights() ? ", bf16 weights for decode" : "") +
                    (m->model->config().attention.state_bf16 &&
                             attnserve::attention::HasFixedState(m->model->config().attention)
                         ? ", bf16 states"
                         : "") +
                    (m->model->config().HasAttention() &&
                             !attnserve::attention::HasFixedState(m->model->config().attention)
                         ? std::string(", ") +
                               attnserve::attention::KvCacheTypeName(
                                   m->model->config().attention.kv_cache_type) +
                               " KV cache"
                         : "") +
                    ")");
  }
  auto server = attnserve::service::AttnServer::Start(*options, *std::move(models));
  if (!server.ok()) {
    std::cerr << "attnserve_server: " << server.status().message() << "\n";
    return 1;
  }
  std::cout << "attnserve_server: serving " << absl::StrJoin(names, ", ") << " on "
            << options->listen_address.substr(0, options->listen_address.rfind(':')) << ":"
            << (*server)->port() << "; metrics on port " << (*server)->metrics_port()
            << "; " << TransportDescription(*options) << "; sessions in "
            << options->session_store
            << (options->session_store == "memory" ? " (lost on exit)" : "") << "; "
            << TenancyDescription((*server)->api_keys(), options->api_keys_file) << std::endl;

  int sig = 0;
  sigwait(&signals, &sig);
  std::cout << "attnserve_server: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
            << ": shutting down (grace " << absl::FormatDuration(options->shutdown_grace)
            << ")" << std::endl;
  (*server)->Shutdown(options->shutdown_grace);
  std::cout << "attnserve_server: stopped" << std::endl;
  return 0;
}
