// session_bench sections 2 and 3: time to first token on sessions in memory vs loaded from a dir:
// or redis:// store, and the time a drain takes to write every session.
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "tests/bench/session_bench.h"

namespace attnserve::bench {
namespace {

struct TtftRow {
  std::string store, model, session;
  int64_t state_bytes = 0;
  std::vector<double> client_ms, server_ms;
  int not_spilled = 0;  // evicted rows: turns whose session was in memory after all
};

constexpr int64_t kTtftContext = 1024;
constexpr int kTtftSessions = 5;  // per model; restart rounds cover ttft_reps samples

void Record(TtftRow& row, const TurnResult& r) {
  CheckOk(r.status, "turn for " + row.store + " " + row.session);
  row.client_ms.push_back(r.ttft_ms);
  row.server_ms.push_back(r.server_ttft_ms);
}

struct TtftModel {
  std::shared_ptr<const catalogue::ServedModel> served;
  std::vector<std::string> ids;
};

// Sessions of every model brought to kTtftContext on `client`'s server.
void CreateTtftSessions(Client& client, std::vector<TtftModel>& models) {
  for (TtftModel& m : models) {
    m.ids.clear();
    for (int k = 0; k < kTtftSessions; ++k) {
      m.ids.push_back(Must(client.CreateSession(m.served->name), "create"));
      CheckOk(client.Generate(m.ids.back(), PromptTokens(kTtftContext, k)).status, "prefill");
    }
  }
}

// The row of `out` for (store `label`, model, kind of session), added if missing.
TtftRow& RowFor(std::vector<TtftRow>& out, const std::string& label, const TtftModel& m,
                const std::string& kind) {
  for (TtftRow& r : out) {
    if (r.store == label && r.model == m.served->name && r.session == kind) return r;
  }
  TtftRow r;
  r.store = label;
  r.model = m.served->name;
  r.session = kind;
  r.state_bytes = m.served->model->StateBytes(kTtftContext);
  out.push_back(std::move(r));
  return out.back();
}

const std::vector<int32_t> kOneToken = {'x'};

// Memory store: turns on sessions in memory, and first turns on imported copies.
void MemoryRows(const Flags& flags, Client& client, std::vector<TtftModel>& models,
                std::vector<TtftRow>& out) {
  for (int i = 0; i < flags.ttft_reps + kTtftSessions; ++i) {  // first pass: warm-up
    for (TtftModel& m : models) {
      TurnResult r = client.Generate(m.ids[size_t(i) % m.ids.size()], kOneToken);
      if (i >= kTtftSessions) Record(RowFor(out, "memory", m, "in memory"), r);
    }
  }
  for (TtftModel& m : models) {
    const std::string bytes = Must(client.Export(m.ids[0]), "export");
    for (int i = 0; i < flags.ttft_reps; ++i) {
      const std::string id = Must(client.Import(bytes), "import");
      Record(RowFor(out, "memory", m, "imported, 1st turn"), client.Generate(id, kOneToken));
      CheckOk(client.Close(id), "close");
    }
  }
}

// Durable store, sessions already drained to it: each round a fresh server loads every
// session on its first turn; the second turn finds it in memory.
void RestartRows(const Flags& flags, const std::string& label, const config::ServerOptions& o,
                 const std::vector<std::shared_ptr<const catalogue::ServedModel>>& served,
                 std::vector<TtftModel>& models, std::vector<TtftRow>& out) {
  const int rounds = (flags.ttft_reps + kTtftSessions - 1) / kTtftSessions;
  for (int round = 0; round < rounds; ++round) {
    auto server = StartServer(o, served);
    {
      Client client(server->port());
      for (int k = 0; k < kTtftSessions; ++k) {
        for (TtftModel& m : models) {
          const std::string& id = m.ids[size_t(k)];
          Record(RowFor(out, label, m, "loaded after restart"), client.Generate(id, kOneToken));
          Record(RowFor(out, label, m, "in memory (next turn)"), client.Generate(id, kOneToken));
        }
      }
    }
    StopServer(server);
  }
}

// Durable store with room for two sessions: turns cycle over three, so each loads its
// session and spills the least recently used one to make room (checked through
// ListSessions).
void EvictionRows(const Flags& flags, const std::string& label, const std::string& spec,
                  const std::vector<std::shared_ptr<const catalogue::ServedModel>>& served,
                  std::vector<TtftModel>& models, std::vector<TtftRow>& out) {
  for (TtftModel& m : models) {
    const int64_t budget = m.served->model->StateBytes(kTtftContext) * 5 / 2;
    auto server = StartServer(BenchServerOptions(spec, budget), served);
    {
      Client client(server->port());
      for (int i = 0; i < flags.ttft_reps + 3; ++i) {  // the first three fill the budget
        const std::string& id = m.ids[size_t(i % 3)];
        const auto before = Must(client.InMemory(), "list");
        const bool spilled = std::find(before.begin(), before.end(), id) == before.end();
        TurnResult r = client.Generate(id, kOneToken);
        if (i < 3) continue;
        TtftRow& row = RowFor(out, label, m, "evicted (load + spill LRU)");
        Record(row, r);
        row.not_spilled += spilled && Must(client.InMemory(), "list").size() == 2 ? 0 : 1;
      }
    }
    StopServer(server);
  }
}

void RunTtftStore(const Flags& flags, const std::string& label, const std::string& spec,
                  std::vector<TtftModel>& models, std::vector<TtftRow>& out) {
  std::vector<std::shared_ptr<const catalogue::ServedModel>> served;
  for (auto& m : models) served.push_back(m.served);
  auto server = StartServer(BenchServerOptions(spec), served);
  {
    Client client(server->port());
    CreateTtftSessions(client, models);
    if (spec == "memory") MemoryRows(flags, client, models, out);
  }
  StopServer(server);  // with a durable store, a drain: every session is in the store now
  if (spec == "memory") return;
  RestartRows(flags, label, BenchServerOptions(spec), served, models, out);
  EvictionRows(flags, label, spec, served, models, out);
}

// One drain: flags.drain_sessions sessions of `model` on a server with store `spec`, each
// with one short turn, then Shutdown(0) timed.
struct Drain {
  int saved = -1;      // from the server's log; -1 if it did not say
  double save_ms = 0;  // likewise
  double shutdown_ms = 0;
  int64_t snapshot_bytes = 0;  // of one session
};

Drain MeasureDrain(const Flags& flags, const std::shared_ptr<const catalogue::ServedModel>& model,
                   const std::string& spec) {
  config::ServerOptions o = BenchServerOptions(spec);
  o.max_sessions = flags.drain_sessions + 16;
  auto server = StartServer(o, {model});
  Drain d;
  {
    Client client(server->port());
    for (int i = 0; i < flags.drain_sessions; ++i) {
      const std::string id = Must(client.CreateSession(model->name), "create");
      CheckOk(client.Generate(id, PromptTokens(16, i)).status, "turn");
      if (i == 0) d.snapshot_bytes = int64_t(Must(client.Export(id), "export").size());
    }
  }
  const auto start = Clock::now();
  std::string log = CaptureStderr([&] { server->Shutdown(absl::ZeroDuration()); });
  d.shutdown_ms = MsSince(start);
  server.reset();
  const size_t at = log.find("drain: saved ");
  if (at == log.npos || std::sscanf(log.c_str() + at, "drain: saved %d sessions to %*s in %lf ms",
                                    &d.saved, &d.save_ms) != 2) {
    std::fprintf(stderr, "session_bench: unexpected drain log: %s\n", log.c_str());
  }
  return d;
}

}  // namespace

void RunTtft(const Flags& flags, const std::string& tmp, RedisServer& redis) {
  std::printf("\n## 2. Time to first token: spilled vs in-memory sessions\n\n");
  std::vector<TtftModel> models = {{MakeServedModel(kBig, "taylor", 2, "ttft-taylor2"), {}},
                                   {MakeServedModel(kBig, "softmax", 0, "ttft-softmax"), {}}};
  std::vector<TtftRow> rows;
  RunTtftStore(flags, "memory", "memory", models, rows);
  RunTtftStore(flags, "dir", "dir:" + tmp + "/ttft", models, rows);
  RunTtftStore(flags, "redis", redis.url(), models, rows);
  CheckOk(redis.Command({"FLUSHALL"}).status(), "redis FLUSHALL");
  std::printf(
      "Shape %s; %d sessions per model at context %lld. A turn is a 1-token prompt, max_tokens 1, "
      "greedy, server threads 1. TTFT = client-side, from sending Generate to the first token "
      "message; \"server\" = Usage.time_to_first_token_ms, which the server starts timing only "
      "after it has claimed (loaded) the session. \"loaded after restart\": the session was "
      "drained to the store by one AttnServer and its first turn on a fresh one loads it (read + "
      "verify + restore); \"evicted\": memory_budget holds 2 sessions and turns cycle over 3, so "
      "every turn loads its session and first writes the LRU one to the store. n = samples.\n\n",
      kBig.label, kTtftSessions, (long long)kTtftContext);
  Table t({"store", "model", "state", "session", "TTFT ms", "p90 ms", "server ms", "n"});
  for (const TtftRow& r : rows) {
    t.Add({r.store, r.model, HumanBytes(double(r.state_bytes)), r.session,
           FormatMs(Median(r.client_ms)), FormatMs(Percentile(r.client_ms, 0.9)),
           FormatMs(Median(r.server_ms)),
           r.not_spilled == 0 ? std::to_string(r.client_ms.size())
                              : Format("%zu (%d NOT evicted)", r.client_ms.size(), r.not_spilled)});
  }
  t.Print();
}

void RunDrain(const Flags& flags, const std::string& tmp, RedisServer& redis) {
  std::printf("\n## 3. Drain: Shutdown(0) writing %d taylor order 2 sessions\n\n",
              flags.drain_sessions);
  Table t({"shape", "store", "state/session", "written", "bytes", "SaveAll ms", "Shutdown ms",
           "ms/session", "MB/s"});
  int index = 0;
  for (const Shape* shape : {&kTiny, &kMid}) {
    auto model = MakeServedModel(*shape, "taylor", 2, absl::StrCat("drain-", index++));
    for (const std::string store : {"dir", "redis"}) {
      if (store == "redis") CheckOk(redis.Command({"FLUSHALL"}).status(), "redis FLUSHALL");
      const std::string dir = absl::StrCat(tmp, "/drain-", index, "-", store);
      const Drain d = MeasureDrain(flags, model, store == "dir" ? "dir:" + dir : redis.url());
      int64_t stored = 0, bytes = 0;
      if (store == "dir") {
        for (const auto& e : std::filesystem::directory_iterator(dir)) {
          if (e.path().extension() != ".snap") continue;
          ++stored;
          bytes += int64_t(e.file_size());
        }
      } else {
        // Snapshot values only (the store also keeps lease and generation keys); the first
        // line of the reply is "*<count>".
        const std::string n = Must(redis.Command({"KEYS", "attnserve:session:*"}), "KEYS");
        stored = std::stoll(n.substr(1));
        bytes = stored * d.snapshot_bytes;
      }
      // Without the server's log line, the whole Shutdown call stands in for the save.
      const bool logged = d.saved >= 0 && d.save_ms > 0;
      const double write_ms = logged ? d.save_ms : d.shutdown_ms;
      const int64_t written = logged ? d.saved : stored;
      t.Add({shape->label, store, HumanBytes(double(model->model->StateBytes(0))),
             Format("%s (in store: %lld)", logged ? std::to_string(d.saved).c_str() : "?",
                    (long long)stored),
             HumanBytes(double(bytes)), logged ? FormatMs(d.save_ms) : "n/a",
             FormatMs(d.shutdown_ms),
             Format("%.3f", write_ms / double(std::max<int64_t>(written, 1))),
             Format("%.0f", double(bytes) / 1e6 / (write_ms / 1e3))});
    }
  }
  std::printf(
      "Each session had one 16-token turn. SaveAll ms = the server's own drain log (\"saved N "
      "sessions in X ms\"); Shutdown ms = the whole AttnServer::Shutdown(0) call, client-side. "
      "Sessions are saved one after another (dir: one fsynced file each). \"in store\" counts "
      "snapshot files / attnserve:session:* keys afterwards; redis bytes = that count x the "
      "snapshot size.\n\n");
  t.Print();
}

}  // namespace attnserve::bench
