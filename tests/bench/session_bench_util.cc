#include "tests/bench/session_bench_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "server/tokenizer/byte_tokenizer.h"
#include "absl/strings/str_cat.h"
#include "server/model/model.h"
#include "server/catalogue/model_catalogue.h"

namespace attnserve::bench {
namespace {

absl::Status FromGrpc(const grpc::Status& s, const std::string& what) {
  if (s.ok()) return absl::OkStatus();
  return absl::Status(absl::StatusCode(int(s.error_code())),
                      absl::StrCat(what, ": ", s.error_message()));
}

// Every RPC gets a generous deadline: a 16k-token prefill on 2 cores takes a while.
void SetDeadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(10));
}

// Connects to 127.0.0.1:`port`; -1 on failure.
int ConnectLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  if (p == 0.5 && v.size() % 2 == 0) return (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
  const size_t rank = size_t(std::max(0.0, std::ceil(p * double(v.size())) - 1));
  return v[std::min(rank, v.size() - 1)];
}

std::string Format(const char* format, ...) {
  char buffer[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

std::string HumanBytes(double bytes) {
  if (bytes >= 1e9) return Format("%.2f GB", bytes / 1e9);
  if (bytes >= 1e6) return Format("%.2f MB", bytes / 1e6);
  if (bytes >= 1e3) return Format("%.1f kB", bytes / 1e3);
  return Format("%.0f B", bytes);
}

void Table::Print() const {
  std::vector<size_t> width(header_.size(), 3);
  auto widen = [&](const std::vector<std::string>& row) {
    for (size_t i = 0; i < row.size() && i < width.size(); ++i) {
      width[i] = std::max(width[i], row[i].size());
    }
  };
  widen(header_);
  for (const auto& row : rows_) widen(row);
  auto print = [&](const std::vector<std::string>& row) {
    std::string line = "|";
    for (size_t i = 0; i < width.size(); ++i) {
      const std::string cell = i < row.size() ? row[i] : "";
      line += " " + cell + std::string(width[i] - cell.size(), ' ') + " |";
    }
    std::printf("%s\n", line.c_str());
  };
  print(header_);
  std::string rule = "|";
  for (size_t w : width) rule += std::string(w + 2, '-') + "|";
  std::printf("%s\n", rule.c_str());
  for (const auto& row : rows_) print(row);
  std::fflush(stdout);
}

double MemcpyBytesPerSecond(size_t bytes, int reps) {
  std::vector<char> from(bytes, 1), to(bytes, 2);  // both touched: no page faults timed
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    from[size_t(i) % bytes] = char(i);
    const auto start = Clock::now();
    std::memcpy(to.data(), from.data(), bytes);
    seconds.push_back(MsSince(start) / 1e3);
    if (to[size_t(i) % bytes] != char(i)) std::abort();  // keeps the copy observable
  }
  return double(bytes) / Median(seconds);
}

std::shared_ptr<const catalogue::ServedModel> MakeServedModel(const Shape& shape,
                                                            const std::string& module, int order,
                                                            const std::string& name) {
  model::ModelConfig c;
  c.name = name;
  c.dim = shape.dim;
  c.num_layers = shape.num_layers;
  c.mlp_hidden = shape.mlp_hidden;
  c.max_context = shape.max_context;
  c.attention.module = module;
  if (order > 0) c.attention.order = order;
  c.attention.num_heads = shape.num_heads;
  c.attention.num_kv_heads = shape.num_heads;
  c.attention.head_dim = shape.head_dim;
  c.attention.value_dim = shape.head_dim;
  c.attention.chunk_size = 64;
  auto m = Must(model::Model::Create(c, 7), "creating model " + name);
  return std::make_shared<catalogue::ServedModel>(catalogue::ServedModel{
      name, "", std::move(m), {}, std::make_shared<tokenizer::ByteTokenizer>()});
}

std::vector<int32_t> PromptTokens(int64_t n, int64_t offset) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) ids[size_t(i)] = int32_t('a' + (i * 7 + offset) % 26);
  return ids;
}

Client::Client(int port)
    : channel_(grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                   grpc::InsecureChannelCredentials())),
      stub_(v1::AttnServe::NewStub(channel_)) {}

absl::StatusOr<std::string> Client::CreateSession(const std::string& model) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::CreateSessionRequest request;
  request.set_model(model);
  v1::Session session;
  grpc::Status s = stub_->CreateSession(&context, request, &session);
  if (!s.ok()) return FromGrpc(s, "CreateSession");
  return session.id();
}

TurnResult Client::Generate(const std::string& session_id, const std::vector<int32_t>& prompt,
                            int max_tokens) {
  v1::GenerateRequest request;
  request.set_session_id(session_id);
  for (int32_t id : prompt) request.mutable_tokens()->add_ids(id);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  grpc::ClientContext context;
  SetDeadline(context);
  TurnResult out;
  const auto start = Clock::now();
  auto reader = stub_->Generate(&context, request);
  v1::GenerateResponse m;
  bool first = true;
  while (reader->Read(&m)) {
    if (m.has_token() && first) {
      out.ttft_ms = MsSince(start);
      first = false;
    }
    if (m.has_final()) {
      out.server_ttft_ms = m.final().usage().time_to_first_token_ms();
      out.position = m.final().usage().session_position();
      if (!m.final().error().empty()) out.status = absl::InternalError(m.final().error());
    }
  }
  grpc::Status s = reader->Finish();
  out.total_ms = MsSince(start);
  if (!s.ok()) out.status = FromGrpc(s, "Generate");
  if (out.status.ok() && first) out.status = absl::InternalError("Generate: no token");
  return out;
}

absl::StatusOr<std::string> Client::Export(const std::string& session_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ExportSessionRequest request;
  request.set_session_id(session_id);
  auto reader = stub_->ExportSession(&context, request);
  std::string bytes;
  v1::SnapshotChunk chunk;
  while (reader->Read(&chunk)) {
    if (chunk.total_bytes() > 0) bytes.reserve(size_t(chunk.total_bytes()));
    bytes += chunk.data();
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpc(s, "ExportSession");
  return bytes;
}

absl::StatusOr<std::string> Client::Import(const std::string& bytes, size_t chunk_bytes) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::Session session;
  auto writer = stub_->ImportSession(&context, &session);
  v1::ImportSessionRequest request;
  for (size_t offset = 0; offset < bytes.size(); offset += chunk_bytes) {
    request.set_data(bytes.data() + offset, std::min(chunk_bytes, bytes.size() - offset));
    if (!writer->Write(request)) break;  // the server finished early; Finish says why
  }
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (!s.ok()) return FromGrpc(s, "ImportSession");
  return session.id();
}

absl::StatusOr<std::string> Client::Fork(const std::string& session_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ForkSessionRequest request;
  request.set_session_id(session_id);
  v1::Session session;
  grpc::Status s = stub_->ForkSession(&context, request, &session);
  if (!s.ok()) return FromGrpc(s, "ForkSession");
  return session.id();
}

absl::StatusOr<v1::Session> Client::Get(const std::string& session_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::GetSessionRequest request;
  request.set_session_id(session_id);
  v1::Session session;
  grpc::Status s = stub_->GetSession(&context, request, &session);
  if (!s.ok()) return FromGrpc(s, "GetSession");
  return session;
}

absl::Status Client::Close(const std::string& session_id) {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::CloseSessionRequest request;
  request.set_session_id(session_id);
  v1::CloseSessionResponse response;
  return FromGrpc(stub_->CloseSession(&context, request, &response), "CloseSession");
}

absl::StatusOr<std::vector<std::string>> Client::InMemory() {
  grpc::ClientContext context;
  SetDeadline(context);
  v1::ListSessionsResponse response;
  grpc::Status s = stub_->ListSessions(&context, v1::ListSessionsRequest(), &response);
  if (!s.ok()) return FromGrpc(s, "ListSessions");
  std::vector<std::string> ids;
  for (const auto& session : response.sessions()) ids.push_back(session.id());
  return ids;
}

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    CheckOk(absl::UnavailableError(std::strerror(errno)), "finding a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(const std::string& binary) {
  const int port = FreeLoopbackPort();
  const std::string port_text = std::to_string(port);
  const pid_t pid = fork();
  if (pid < 0) return absl::UnavailableError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    const int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execl(binary.c_str(), binary.c_str(), "--port", port_text.c_str(), "--bind", "127.0.0.1",
          "--save", "", "--appendonly", "no", "--loglevel", "warning", nullptr);
    _exit(127);
  }
  std::unique_ptr<RedisServer> server(new RedisServer(pid, port));
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (Clock::now() < until) {
    auto pong = server->Command({"PING"});
    if (pong.ok() && *pong == "+PONG") return server;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      server->pid_ = -1;
      return absl::UnavailableError(absl::StrCat(binary, " exited at start-up"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a child we cannot wait on
  }
  return absl::DeadlineExceededError(absl::StrCat(binary, " did not answer PING in 10 s"));
}

RedisServer::~RedisServer() {
  if (pid_ <= 0) return;
  kill(pid_, SIGTERM);
  int status;
  waitpid(pid_, &status, 0);
}

absl::StatusOr<std::string> RedisServer::Command(const std::vector<std::string>& args) const {
  const int fd = ConnectLoopback(port_);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("connect: ", std::strerror(errno)));
  std::string request = absl::StrCat("*", args.size(), "\r\n");
  for (const auto& a : args) absl::StrAppend(&request, "$", a.size(), "\r\n", a, "\r\n");
  std::string reply;
  bool ok = write(fd, request.data(), request.size()) == ssize_t(request.size());
  char c;
  while (ok && read(fd, &c, 1) == 1 && c != '\n') {
    if (c != '\r') reply += c;
  }
  close(fd);
  if (!ok || reply.empty()) return absl::UnavailableError("redis: no reply");
  return reply;
}

std::string CaptureStderr(const std::function<void()>& fn) {
  char path[] = "/tmp/session_bench_stderr.XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    fn();
    return "";
  }
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string out;
  char buffer[4096];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buffer, sizeof buffer)) > 0;) out.append(buffer, size_t(n));
  close(fd);
  unlink(path);
  return out;
}

config::ServerOptions BenchServerOptions(const std::string& store, int64_t budget) {
  config::ServerOptions o;
  o.listen_address = "127.0.0.1:0";
  o.http_listen = "";  // no HTTP front: tests must not collide on port 8000
  o.metrics_address = "";  // recorded, not served
  o.max_prompt_tokens = 16384;
  o.max_generated_tokens = 16;
  o.default_max_tokens = 1;
  o.max_sessions = 4096;
  o.memory_budget_bytes = budget;
  o.session_store = store;
  return o;
}

std::unique_ptr<service::AttnServer> StartServer(
    const config::ServerOptions& o,
    const std::vector<std::shared_ptr<const catalogue::ServedModel>>& models) {
  return Must(service::AttnServer::Start(o, std::make_unique<catalogue::ModelCatalogue>(models)),
              "starting the server on " + o.session_store);
}

std::string StopServer(std::unique_ptr<service::AttnServer>& server) {
  std::string log = CaptureStderr([&] { server->Shutdown(absl::ZeroDuration()); });
  server.reset();
  return log;
}

std::string FormatMs(double ms) { return ms < 10 ? Format("%.2f", ms) : Format("%.1f", ms); }

void CheckOk(const absl::Status& status, const std::string& what) {
  if (status.ok()) return;
  std::fprintf(stderr, "session_bench: %s: %s\n", what.c_str(), status.ToString().c_str());
  std::exit(1);
}

}  // namespace attnserve::bench
