// session_bench section 1: ExportSession, ImportSession and ForkSession time and bytes per module
// and context, over gRPC on loopback; then the snapshot codec's pieces in process.
#include <algorithm>
#include <cstring>
#include <random>

#include "absl/strings/str_cat.h"
#include "server/common/crc32c.h"
#include "server/snapshot/snapshot.h"
#include "tests/bench/session_bench.h"

namespace attnserve::bench {
namespace {

struct Module {
  const char* label;
  const char* name;
  int order;
};
constexpr Module kModules[] = {{"softmax", "softmax", 0},
                               {"softmax_norm", "softmax_norm", 0},
                               {"taylor order 2", "taylor", 2},
                               {"taylor_norm order 2", "taylor_norm", 2},
                               {"linear", "linear", 0}};

struct TransferRow {
  const Module* module = nullptr;
  int64_t context = 0;
  std::shared_ptr<const catalogue::ServedModel> model;
  std::string session_id;
  double setup_s = 0;
  std::shared_ptr<const std::string> snapshot;
  int64_t state_bytes = 0;
  std::vector<double> export_ms, import_ms, fork_ms;
  std::vector<double> encode_ms, crc_ms, verify_ms, restore_ms, clone_ms, memcpy_ms;
};

void TimeTransfers(Client& client, TransferRow& row, bool record) {
  auto start = Clock::now();
  std::string bytes = Must(client.Export(row.session_id), "export");
  const double export_ms = MsSince(start);
  start = Clock::now();
  const std::string imported = Must(client.Import(bytes), "import");
  const double import_ms = MsSince(start);
  CheckOk(client.Close(imported), "close");
  start = Clock::now();
  const std::string forked = Must(client.Fork(row.session_id), "fork");
  const double fork_ms = MsSince(start);
  CheckOk(client.Close(forked), "close");
  row.snapshot = std::make_shared<const std::string>(std::move(bytes));
  if (!record) return;
  row.export_ms.push_back(export_ms);
  row.import_ms.push_back(import_ms);
  row.fork_ms.push_back(fork_ms);
}

// The codec alone, in this thread, on the row's last exported snapshot.
void TimeCodec(const catalogue::ModelCatalogue& catalogue, TransferRow& row, int reps) {
  const uint64_t no_limit = ~uint64_t{0};
  auto verified = Must(snapshot::VerifySnapshot(row.snapshot, catalogue, no_limit), "verify");
  row.state_bytes = verified.state_bytes;
  auto state = Must(snapshot::RestoreSnapshotState(verified), "restore");
  std::string copy(row.snapshot->size(), 'x');
  for (int i = 0; i < reps; ++i) {
    auto start = Clock::now();
    std::string encoded = snapshot::EncodeSnapshot(*row.model, state.get(), verified.info);
    row.encode_ms.push_back(MsSince(start));
    start = Clock::now();
    volatile uint32_t crc = Crc32c(0, row.snapshot->data(), row.snapshot->size());
    (void)crc;
    row.crc_ms.push_back(MsSince(start));
    start = Clock::now();
    auto again = snapshot::VerifySnapshot(row.snapshot, catalogue, no_limit);
    row.verify_ms.push_back(MsSince(start));
    start = Clock::now();
    auto restored = snapshot::RestoreSnapshotState(*again);
    row.restore_ms.push_back(MsSince(start));
    start = Clock::now();
    auto clone = state->Clone();
    row.clone_ms.push_back(MsSince(start));
    start = Clock::now();
    std::memcpy(copy.data(), row.snapshot->data(), copy.size());
    row.memcpy_ms.push_back(MsSince(start));
  }
}

}  // namespace

void RunTransfer(const Flags& flags, double bandwidth) {
  std::printf("\n## 1. Export, import and fork per session (gRPC on loopback)\n\n");
  std::vector<std::shared_ptr<const catalogue::ServedModel>> models;
  std::vector<TransferRow> rows;
  for (const Module& m : kModules) {
    if (std::string(m.name).find(flags.modules) == std::string::npos) continue;
    auto model = MakeServedModel(kBig, m.name, m.order, absl::StrCat("bench-", m.name));
    models.push_back(model);
    for (int64_t context : {1024, 16384}) {
      if (flags.context != 0 && context != flags.context) continue;
      TransferRow row;
      row.module = &m;
      row.context = context;
      row.model = model;
      const bool kv = model->model->BreakEvenContext() == 0;
      if (kv && context == 16384 && flags.kv16k_layers > 0 &&
          flags.kv16k_layers != kBig.num_layers) {
        Shape shape = kBig;
        shape.num_layers = flags.kv16k_layers;
        row.model = MakeServedModel(shape, m.name, m.order,
                                    absl::StrCat("bench-", m.name, "-", shape.num_layers, "l"));
        models.push_back(row.model);
      }
      rows.push_back(std::move(row));
    }
  }
  auto server = StartServer(BenchServerOptions("memory"), models);
  Client client(server->port());
  Table setup({"module", "context", "layers", "prefill (setup) s"});
  for (TransferRow& row : rows) {
    row.session_id = Must(client.CreateSession(row.model->name), "create");
    const auto start = Clock::now();
    CheckOk(client.Generate(row.session_id, PromptTokens(row.context)).status, "prefill");
    row.setup_s = MsSince(start) / 1e3;
    setup.Add({row.module->label, std::to_string(row.context),
               std::to_string(row.model->model->config().num_layers), Format("%.1f", row.setup_s)});
  }
  std::printf(
      "Setup: one session per row, brought to its context by one Generate of that many token ids "
      "(max_tokens 1); server threads 1.\n\n");
  setup.Print();
  if (flags.kv16k_layers > 0 && flags.kv16k_layers != kBig.num_layers) {
    std::printf(
        "\nNOTE: the 16k rows of KV-cache modules use %d layers (--kv16k_layers), not %d; "
        "their bytes and times are for that depth.\n",
        flags.kv16k_layers, kBig.num_layers);
  }

  for (TransferRow& row : rows) TimeTransfers(client, row, false);  // warm-up
  std::mt19937 rng(1);
  std::vector<TransferRow*> order;
  for (TransferRow& row : rows) order.push_back(&row);
  for (int rep = 0; rep < flags.reps; ++rep) {
    std::shuffle(order.begin(), order.end(), rng);
    for (TransferRow* row : order) TimeTransfers(client, *row, true);
  }
  server.reset();

  const int codec_reps = flags.codec_reps < 0 ? flags.reps : flags.codec_reps;
  catalogue::ModelCatalogue catalogue(models);
  for (TransferRow& row : rows) TimeCodec(catalogue, row, codec_reps);

  std::printf(
      "\nMedians of %d repetitions, rows interleaved in a new random order each repetition. "
      "Client-side times: export = ExportSession until the last chunk is appended to a string; "
      "import = ImportSession streaming 1 MiB chunks until the response; fork = ForkSession. "
      "Imported and forked sessions are closed (untimed) after each. \"bytes/bw\" = snapshot bytes "
      "/ measured memcpy bandwidth (%.1f GB/s): the time of one copy. state = the snapshot's "
      "tensor "
      "payload; overhead = snapshot - state.\n\n",
      flags.reps, bandwidth / 1e9);
  Table t({"module", "context", "layers", "state", "snapshot", "overhead B", "export ms",
           "import ms", "fork ms", "bytes/bw ms", "p90 export/import/fork ms"});
  for (const TransferRow& row : rows) {
    const double size = double(row.snapshot->size());
    t.Add({row.module->label, std::to_string(row.context),
           std::to_string(row.model->model->config().num_layers),
           HumanBytes(double(row.state_bytes)), HumanBytes(size),
           std::to_string(int64_t(size) - row.state_bytes), FormatMs(Median(row.export_ms)),
           FormatMs(Median(row.import_ms)), FormatMs(Median(row.fork_ms)),
           FormatMs(size / bandwidth * 1e3),
           absl::StrCat(FormatMs(Percentile(row.export_ms, 0.9)), " / ",
                        FormatMs(Percentile(row.import_ms, 0.9)), " / ",
                        FormatMs(Percentile(row.fork_ms, 0.9)))});
  }
  t.Print();
  if (codec_reps == 0) return;

  std::printf(
      "\n### 1b. The snapshot codec in process (same snapshots, this thread, medians of "
      "%d)\n\nencode = EncodeSnapshot of a restored state; crc = CRC-32C of the snapshot; verify = "
      "VerifySnapshot (CRC + parse); restore = RestoreSnapshotState (what the first turn after an "
      "import or load pays); clone = DecodeState::Clone; memcpy = one copy of the snapshot's "
      "bytes.\n\n",
      codec_reps);
  Table c({"module", "context", "snapshot", "encode ms", "crc ms", "verify ms", "restore ms",
           "clone ms", "memcpy ms"});
  for (const TransferRow& row : rows) {
    c.Add({row.module->label, std::to_string(row.context), HumanBytes(double(row.snapshot->size())),
           FormatMs(Median(row.encode_ms)), FormatMs(Median(row.crc_ms)),
           FormatMs(Median(row.verify_ms)), FormatMs(Median(row.restore_ms)),
           FormatMs(Median(row.clone_ms)), FormatMs(Median(row.memcpy_ms))});
  }
  c.Print();
}

}  // namespace attnserve::bench
