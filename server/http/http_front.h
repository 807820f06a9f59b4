// The OpenAI-compatible HTTP/1.1 edge of attnserve_server (cpp-httplib): /health,
// /v1/models, /v1/completions and /v1/chat/completions, streamed as server-sent events or
// answered whole. Requests go through the same API keys, admission (ParseGenerate),
// session store and scheduler as gRPC (service::StartTurn).
//
// Threads: cpp-httplib serves each open connection on one thread of a fixed pool, for
// as long as the connection lives (a stream pins its thread until it ends), and its queue
// of accepted connections never refuses. So generating requests are admitted by our own
// counter: at most max_streams at once (waiting for their session included); one more is
// answered 429 with retry-after at once. The pool has more threads than max_streams, so
// /health, /v1/models and the refusals are answered while every stream slot is busy. An
// idle keep-alive connection holds a thread for at most 5 s (and 100 requests), so idle
// clients cannot keep the spare threads forever; connections beyond the pool wait in the
// accept queue until a thread is free.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/catalogue/model_catalogue.h"
#include "server/http/chat_template.h"
#include "server/metrics/metrics.h"
#include "server/scheduler/scheduler.h"
#include "server/service/admission.h"
#include "server/service/api_keys.h"
#include "server/session/session_store.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace attnserve::http {

struct HttpFrontOptions {
  // HOST:PORT; port 0 binds an ephemeral port (see HttpFront::port).
  std::string listen;
  // Generating requests in flight at once (ServerOptions::http_max_streams).
  int max_streams = 64;
  // cpp-httplib's threads; must exceed max_streams.
  int threads = 72;
  // A write that cannot proceed this long (the client stopped reading) fails, which
  // cancels the turn.
  absl::Duration write_timeout = absl::Seconds(60);
  // A stream with nothing to send this long (a long prefill, a paused turn) sends a
  // ": ping" comment, which clients ignore; a failed ping is a client gone.
  absl::Duration ping_interval = absl::Seconds(2);
};

// What the front serves with; not owned, all must outlive it. metrics may be null.
struct HttpFrontDeps {
  const catalogue::ModelCatalogue* models = nullptr;
  session::SessionStore* store = nullptr;
  scheduler::Scheduler* scheduler = nullptr;
  metrics::Metrics* metrics = nullptr;
  const service::ApiKeys* keys = nullptr;
  service::RequestLimits limits;
};

class HttpFront {
 public:
  // Binds `options.listen` and starts serving. UNAVAILABLE if the address cannot be bound.
  // Ignores SIGPIPE for the process: cpp-httplib writes to sockets without MSG_NOSIGNAL,
  // and a client that closes its connection must not end the server.
  static absl::StatusOr<std::unique_ptr<HttpFront>> Start(HttpFrontOptions options,
                                                          HttpFrontDeps deps);
  ~HttpFront();  // Stop()

  int port() const { return port_; }
  // From now on /health answers 503 {"status":"draining"} and generating routes 503 with
  // retry-after; streams in flight go on. Any thread.
  void StartDraining() { draining_.store(true); }
  // Stops listening and waits for every connection's thread; streams still open end
  // (the scheduler should have finished their turns first).
  void Stop();

  // Generating requests holding a slot now; a slot is freed only after its turn's
  // session is released.
  int streams_in_flight() const;
  // Waits until no request holds a slot, at most `timeout`; false on timeout. For tests
  // and drains.
  bool WaitForNoStreams(absl::Duration timeout) const;

 private:
  class Slot;
  struct Model;
  HttpFront(HttpFrontOptions options, HttpFrontDeps deps);
  void AddRoutes();
  void Health(const httplib::Request& req, httplib::Response& res);
  void Models(const httplib::Request& req, httplib::Response& res);
  void Generate(const std::string& route_name, int route, const httplib::Request& req,
                httplib::Response& res);
  // Counts one answered request in requests_total (method = route, code = HTTP status).
  void Record(const std::string& route_name, int status, const std::string& model) const;
  // Answers `status` as an OpenAI error and counts it.
  void Fail(const std::string& route_name, const absl::Status& status, httplib::Response& res,
            const std::string& model = "") const;
  // Takes a stream slot; false when all max_streams are taken.
  bool Acquire();
  void Release();

  const HttpFrontOptions options_;
  const HttpFrontDeps deps_;
  const int64_t created_;  // the models' "created": when the server started
  // Each model's and variant's chat template (or why it has none), by name.
  std::vector<std::pair<std::string, absl::StatusOr<ChatTemplateKind>>> templates_;
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable idle_;
  int streams_ = 0;  // guarded by mu_
};

}  // namespace attnserve::http
