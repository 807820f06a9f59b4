// scale_bench_client: the measuring half of tests/bench/scale_bench.sh, which starts the
// real processes (redis-server, attnserve_server replicas, HAProxy) and prints the tables.
// Prints JSON (one object per line, or a file of records); asserts nothing.
//
//   migrate   TTFT of a turn on the replica that holds a session in memory ("home"),
//             of its next turn sent straight to another replica ("migrate": that replica
//             loads it from the store) and of the turn after that back on the first one
//             ("back": its copy in memory is stale, so it takes the newer one from the
//             store). Every turn carries x-session-id; the sessions alternate which
//             replica is home.
//   loop      N conversations through one address (the proxy), each creating a session
//             and running turns back to back until --stop_file exists; one record per
//             turn (wall-clock start, TTFT including retries, retries, continuations,
//             errors) written to --out.
//   store     Where a migration's time goes on the store side, on snapshots the replicas
//             wrote: RedisSnapshotStore's GetWithGeneration (MULTI GET GET EXEC, what the
//             server loads a session with) against a plain GET of the bytes (the floor), a
//             lease taken, CRC-32C and a copy of the bytes; and the server's fenced write
//             (PutFenced: SET to a staging key, then a Lua fence that RENAMEs it into
//             place) against a plain SET of the bytes (the floor) and against passing the
//             bytes through a Lua script that SETs them (how PutFenced wrote before).
#include <hiredis/hiredis.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "attnserve/v1/attnserve.grpc.pb.h"
#include "client/connection.h"
#include "client/flags.h"
#include "client/percentiles.h"
#include "client/retry.h"
#include "client/turn.h"
#include "server/common/crc32c.h"
#include "server/store/redis_store.h"

namespace attnserve::bench {
namespace {

namespace v1 = ::attnserve::v1;
using client::GlobalOptions;
using client::RetryClock;
using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

int64_t EpochMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "scale_bench_client: %s\n", message.c_str());
  std::exit(1);
}

std::vector<std::string> ParseOrDie(client::FlagSet& flags, const std::vector<std::string>& args) {
  auto positional =
      flags.Parse(args, [](const std::string&) -> std::optional<std::string> { return {}; });
  if (!positional.ok()) Die(std::string(positional.status().message()));
  return *positional;
}

std::unique_ptr<v1::AttnServe::Stub> StubFor(const std::string& address) {
  GlobalOptions options;
  options.server = address;
  options.connect_timeout_seconds = 10;
  auto channel = client::Connect(options);
  if (!channel.ok()) Die(std::string(channel.status().message()));
  return v1::AttnServe::NewStub(*channel);
}

std::string JsonArray(const std::vector<double>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ",", [](std::string* out, double x) {
                        absl::StrAppendFormat(out, "%.3f", x);
                      }),
                      "]");
}

// `s` as a JSON string body: quotes, backslashes and control characters escaped.
std::string JsonEscape(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(char(c));
    } else if (c < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x", c);
    } else {
      out.push_back(char(c));
    }
  }
  return out;
}

// One turn's observations.
struct Turn {
  double ttft_ms = -1;   // client: request sent -> first token message (retries included)
  double total_ms = 0;   // client: the whole turn
  double server_ttft_ms = -1;  // Usage.time_to_first_token_ms (arrival -> first token)
  int64_t tokens = 0;
  int64_t retries = 0;
  int64_t continuations = 0;
  std::string error;
};

Turn RunOneTurn(v1::AttnServe::Stub& stub, const std::string& session_id,
                const std::string& prompt, int max_tokens) {
  v1::GenerateRequest request;
  request.set_session_id(session_id);
  request.set_text(prompt);
  request.mutable_sampling()->set_max_tokens(max_tokens);
  request.mutable_sampling()->set_ignore_eos(true);
  GlobalOptions options;  // deadline: the client's streaming default
  static const RetryClock clock;
  Turn turn;
  const Clock::time_point start = Clock::now();
  const client::TurnResult result =
      client::RunTurn(stub, request, options, clock, [&](const v1::Token&) {
        if (turn.ttft_ms < 0) turn.ttft_ms = MsSince(start);
      });
  turn.total_ms = MsSince(start);
  turn.tokens = result.token_messages;
  turn.retries = result.retries;
  turn.continuations = result.continuations;
  turn.error = client::TurnError(result);
  if (result.final.has_value()) {
    turn.server_ttft_ms = result.final->usage().time_to_first_token_ms();
  }
  return turn;
}

absl::StatusOr<std::string> CreateSession(v1::AttnServe::Stub& stub, const std::string& model,
                                          int64_t* retries) {
  v1::CreateSessionRequest request;
  request.set_model(model);
  v1::Session session;
  static const RetryClock clock;
  client::RetryLoop loop(GlobalOptions(), client::kUnaryTimeoutSeconds, clock);
  const grpc::Status status = loop.Run("", [&](grpc::ClientContext* context) {
    return stub.CreateSession(context, request, &session);
  });
  if (retries != nullptr) *retries += loop.retries();
  if (!status.ok()) return absl::UnavailableError(client::FormatRpcError(status));
  return session.id();
}

void CloseSession(v1::AttnServe::Stub& stub, const std::string& id, int64_t* retries) {
  v1::CloseSessionRequest request;
  request.set_session_id(id);
  v1::CloseSessionResponse response;
  static const RetryClock clock;
  client::RetryLoop loop(GlobalOptions(), client::kUnaryTimeoutSeconds, clock);
  loop.Run(id, [&](grpc::ClientContext* context) {
    return stub.CloseSession(context, request, &response);
  });
  if (retries != nullptr) *retries += loop.retries();
}

// --- migrate -------------------------------------------------------------------------

int RunMigrate(const std::vector<std::string>& args) {
  client::FlagSet flags;
  std::string a = "", b = "", model = "", prompt = "And the next line of the story.";
  int32_t sessions = 50, max_tokens = 4, keep = 0;
  bool alternate = true;
  flags.Add("a", &a, "first replica's gRPC address");
  flags.Add("b", &b, "second replica's gRPC address");
  flags.Add("model", &model, "model name");
  flags.Add("sessions", &sessions, "sessions (one sample per category each)");
  flags.Add("max_tokens", &max_tokens, "tokens per turn");
  flags.Add("prompt", &prompt, "text of every turn");
  flags.Add("alternate", &alternate,
            "swap A and B for every other session (--noalternate: A is always home)");
  flags.Add("keep", &keep, "leave this many sessions open and list their ids (for 'store')");
  ParseOrDie(flags, args);
  if (a.empty() || b.empty()) Die("migrate: --a and --b are required");
  std::unique_ptr<v1::AttnServe::Stub> stubs[2] = {StubFor(a), StubFor(b)};

  struct Category {
    const char* name;
    std::vector<double> client, server;
  };
  Category home{"home", {}, {}}, migrate{"migrate", {}, {}}, back{"back", {}, {}};
  int64_t retries = 0, errors = 0;
  std::string first_error;
  std::vector<std::string> kept;
  auto record = [&](Category& c, const Turn& t) {
    retries += t.retries;
    if (!t.error.empty() || t.ttft_ms < 0) {
      if (errors++ == 0) first_error = t.error.empty() ? "no token" : t.error;
      return;
    }
    c.client.push_back(t.ttft_ms);
    c.server.push_back(t.server_ttft_ms);
  };
  for (int i = 0; i < sessions; ++i) {
    const int home_index = alternate ? i % 2 : 0;
    v1::AttnServe::Stub& h = *stubs[home_index];      // home replica
    v1::AttnServe::Stub& o = *stubs[1 - home_index];  // the other one
    auto id = CreateSession(h, model, &retries);
    if (!id.ok()) Die(absl::StrCat("migrate: CreateSession: ", id.status().message()));
    // A first turn, not measured: the session has a state and is held by `h`.
    const Turn warm = RunOneTurn(h, *id, prompt, max_tokens);
    if (!warm.error.empty()) Die(absl::StrCat("migrate: first turn: ", warm.error));
    record(home, RunOneTurn(h, *id, prompt, max_tokens));
    record(migrate, RunOneTurn(o, *id, prompt, max_tokens));
    record(back, RunOneTurn(h, *id, prompt, max_tokens));
    if (int(kept.size()) < keep) {
      kept.push_back(*id);
    } else {
      CloseSession(h, *id, &retries);
    }
  }
  std::printf("{\"model\":\"%s\",\"sessions\":%d,\"max_tokens\":%d,\"retries\":%lld,"
              "\"errors\":%lld,\"first_error\":\"%s\"",
              model.c_str(), sessions, max_tokens, static_cast<long long>(retries),
              static_cast<long long>(errors), JsonEscape(first_error).c_str());
  for (const Category* c : {&home, &migrate, &back}) {
    std::printf(",\"%s\":{\"client_ms\":%s,\"server_ms\":%s}", c->name,
                JsonArray(c->client).c_str(), JsonArray(c->server).c_str());
  }
  std::printf(",\"kept\":[%s]}\n",
              absl::StrJoin(kept, ",", [](std::string* out, const std::string& s) {
                absl::StrAppend(out, "\"", s, "\"");
              }).c_str());
  return errors == 0 ? 0 : 1;
}

// --- loop ----------------------------------------------------------------------------

struct LoopRecord {
  int session = 0;
  int64_t start_epoch_ms = 0;
  Turn turn;
};

int RunLoop(const std::vector<std::string>& args) {
  client::FlagSet flags;
  std::string server, model, out, stop_file,
      prompt = "Tell me more about what happened next.";
  int32_t sessions = 32, max_tokens = 32, think_ms = 0;
  flags.Add("server", &server, "gRPC address (the proxy)");
  flags.Add("model", &model, "model name; empty: the server's default");
  flags.Add("sessions", &sessions, "concurrent conversations, one thread each");
  flags.Add("max_tokens", &max_tokens, "tokens per turn");
  flags.Add("think_ms", &think_ms, "pause between a conversation's turns");
  flags.Add("prompt", &prompt, "text of every turn");
  flags.Add("out", &out, "file for the per-turn records (TSV)");
  flags.Add("stop_file", &stop_file, "the conversations stop when this file exists");
  ParseOrDie(flags, args);
  if (server.empty() || out.empty() || stop_file.empty()) {
    Die("loop: --server, --out and --stop_file are required");
  }
  auto stub = StubFor(server);
  std::mutex mu;
  std::vector<LoopRecord> records;
  std::atomic<int64_t> session_retries{0}, session_errors{0};
  std::atomic<int> ready{0};
  auto stopped = [&] {
    struct stat st;
    return ::stat(stop_file.c_str(), &st) == 0;
  };
  std::vector<std::thread> threads;
  for (int s = 0; s < sessions; ++s) {
    threads.emplace_back([&, s] {
      int64_t retries = 0;
      auto id = CreateSession(*stub, model, &retries);
      session_retries += retries;
      if (!id.ok()) {
        std::fprintf(stderr, "loop: session %d: %s\n", s,
                     std::string(id.status().message()).c_str());
        ++session_errors;
        return;
      }
      ++ready;
      std::vector<LoopRecord> mine;
      while (!stopped()) {
        LoopRecord r;
        r.session = s;
        r.start_epoch_ms = EpochMs();
        r.turn = RunOneTurn(*stub, *id, prompt, max_tokens);
        if (!r.turn.error.empty()) {
          std::fprintf(stderr, "loop: session %d turn: %s\n", s, r.turn.error.c_str());
        }
        mine.push_back(std::move(r));
        if (think_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(think_ms));
      }
      retries = 0;
      CloseSession(*stub, *id, &retries);
      session_retries += retries;
      std::lock_guard<std::mutex> lock(mu);
      records.insert(records.end(), mine.begin(), mine.end());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(records.begin(), records.end(), [](const LoopRecord& x, const LoopRecord& y) {
    return x.start_epoch_ms < y.start_epoch_ms;
  });
  FILE* f = std::fopen(out.c_str(), "w");
  if (f == nullptr) Die("loop: cannot write " + out);
  std::fprintf(f, "session\tstart_epoch_ms\tttft_ms\ttotal_ms\tserver_ttft_ms\ttokens\t"
                  "retries\tcontinuations\terror\n");
  for (const LoopRecord& r : records) {
    std::fprintf(f, "%d\t%lld\t%.3f\t%.3f\t%.3f\t%lld\t%lld\t%lld\t%s\n", r.session,
                 static_cast<long long>(r.start_epoch_ms), r.turn.ttft_ms, r.turn.total_ms,
                 r.turn.server_ttft_ms, static_cast<long long>(r.turn.tokens),
                 static_cast<long long>(r.turn.retries),
                 static_cast<long long>(r.turn.continuations),
                 r.turn.error.empty() ? "-" : absl::StrReplaceAll(r.turn.error, {{"\t", " "}, {"\n", " "}}).c_str());
  }
  std::fclose(f);
  std::printf("{\"turns\":%zu,\"session_retries\":%lld,\"session_errors\":%lld}\n",
              records.size(), static_cast<long long>(session_retries.load()),
              static_cast<long long>(session_errors.load()));
  return 0;
}

// --- store ---------------------------------------------------------------------------

struct Reply {
  redisReply* r = nullptr;
  ~Reply() {
    if (r != nullptr) freeReplyObject(r);
  }
};

// KEYS: snapshot. ARGV: bytes. The bytes pass through Lua, as PutFenced's script took them
// before it staged them: the comparison for the staged write.
constexpr char kSetThroughLua[] = "return redis.call('SET', KEYS[1], ARGV[1], 'PX', 60000)";

int RunStore(const std::vector<std::string>& args) {
  client::FlagSet flags;
  std::string ids_text;
  int32_t port = 0, reps = 5;
  flags.Add("port", &port, "redis-server port on 127.0.0.1");
  flags.Add("ids", &ids_text, "comma-separated session ids stored there");
  flags.Add("reps", &reps, "passes over the ids");
  ParseOrDie(flags, args);
  const std::vector<std::string> ids = absl::StrSplit(ids_text, ',', absl::SkipEmpty());
  if (port == 0 || ids.empty()) Die("store: --port and --ids are required");

  auto store = store::RedisSnapshotStore::Create({"127.0.0.1", port, 0});
  redisContext* raw = redisConnect("127.0.0.1", port);
  if (raw == nullptr || raw->err != 0) Die("store: cannot connect to redis");

  std::vector<double> read_ms, get_ms, lease_ms, crc_ms, copy_ms, put_fenced_ms, set_ms,
      through_lua_ms;
  int64_t bytes = 0;
  uint32_t sink = 0;
  // One untimed pass loads the script and warms both connections.
  for (const auto& id : ids) {
    if (!store->GetWithGeneration(id).ok()) Die("store: no snapshot for session " + id);
    if (!store->Get(id).ok()) Die("store: GET " + id);
  }
  for (int rep = 0; rep < reps; ++rep) {
    for (const auto& id : ids) {
      Clock::time_point t = Clock::now();
      auto got = store->GetWithGeneration(id);
      read_ms.push_back(MsSince(t));
      if (!got.ok()) Die("store: " + std::string(got.status().message()));
      bytes = int64_t(got->first.size());

      t = Clock::now();
      auto plain = store->Get(id);
      get_ms.push_back(MsSince(t));
      if (!plain.ok()) Die("store: " + std::string(plain.status().message()));

      t = Clock::now();
      auto grant = store->AcquireLease(id, absl::Seconds(5));
      if (!grant.ok()) Die("store: lease: " + std::string(grant.status().message()));
      lease_ms.push_back(MsSince(t));
      (void)store->ReleaseLease(id, grant->token);

      // Writes, on keys of their own: the server's fenced write, a plain SET of the same
      // bytes, and the bytes passed through a Lua script that SETs them.
      const std::string wid = absl::StrCat("scale-bench-write-", rep, "-", &id - &ids[0]);
      auto wgrant = store->AcquireLease(wid, absl::Seconds(5));
      if (!wgrant.ok()) Die("store: write lease: " + std::string(wgrant.status().message()));
      t = Clock::now();
      auto written = store->PutFenced(wid, got->first, absl::Seconds(60), wgrant->token,
                                      wgrant->generation);
      put_fenced_ms.push_back(MsSince(t));
      if (!written.ok()) Die("store: PutFenced: " + std::string(written.status().message()));
      (void)store->ReleaseLease(wid, wgrant->token);
      (void)store->Delete(wid);
      const std::string wkey = store::RedisSnapshotStore::Key(wid) + ":raw";
      for (const bool through_lua : {false, true}) {
        t = Clock::now();
        Reply r;
        r.r = static_cast<redisReply*>(
            through_lua ? redisCommand(raw, "EVAL %s 1 %b %b", kSetThroughLua, wkey.data(),
                                       wkey.size(), got->first.data(), got->first.size())
                        : redisCommand(raw, "SET %b %b PX 60000", wkey.data(), wkey.size(),
                                       got->first.data(), got->first.size()));
        (through_lua ? through_lua_ms : set_ms).push_back(MsSince(t));
        if (r.r == nullptr || r.r->type == REDIS_REPLY_ERROR) Die("store: raw SET failed");
      }
      Reply unlinked;
      unlinked.r = static_cast<redisReply*>(redisCommand(raw, "UNLINK %b", wkey.data(), wkey.size()));

      t = Clock::now();
      sink ^= Crc32c(0, got->first.data(), got->first.size());
      crc_ms.push_back(MsSince(t));

      t = Clock::now();
      std::vector<char> target(got->first.size());  // a fresh allocation, as a restore makes
      std::memcpy(target.data(), got->first.data(), got->first.size());
      sink ^= uint32_t(target[target.size() / 2]);
      copy_ms.push_back(MsSince(t));
    }
  }
  redisFree(raw);
  auto line = [](const char* name, const std::vector<double>& v) {
    return absl::StrFormat("\"%s\":%s", name, JsonArray(v));
  };
  const std::string out = absl::StrCat(
      "{\"bytes\":", bytes, ",\"sink\":", sink & 1, ",",
      absl::StrJoin({line("get_with_generation", read_ms), line("get", get_ms),
                     line("acquire_lease", lease_ms), line("crc32c", crc_ms),
                     line("copy", copy_ms), line("put_fenced", put_fenced_ms),
                     line("set", set_ms), line("set_through_lua", through_lua_ms)},
                    ","),
      "}");
  std::printf("%s\n", out.c_str());
  return 0;
}

int Main(int argc, char** argv) {
  const char* usage =
      "usage: scale_bench_client migrate --a=ADDR --b=ADDR --model=NAME [--sessions=50]\n"
      "       scale_bench_client loop --server=ADDR --out=FILE --stop_file=PATH [--sessions=32]\n"
      "       scale_bench_client store --port=PORT --ids=ID,ID,...\n";
  if (argc < 2) {
    std::fprintf(stderr, "%s", usage);
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  if (command == "migrate") return RunMigrate(args);
  if (command == "loop") return RunLoop(args);
  if (command == "store") return RunStore(args);
  std::fprintf(stderr, "%s", usage);
  return 2;
}

}  // namespace
}  // namespace attnserve::bench

int main(int argc, char** argv) { return attnserve::bench::Main(argc, argv); }
