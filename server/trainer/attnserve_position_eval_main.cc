// attnserve_position_eval: loss by position along long contexts. Feeds stretches of the
// validation text (each --length bytes, default 16k, starting every --stride bytes)
// continuously through the model's serving path (chunked prefill into one session per
// stretch) and prints the mean loss per position bucket as one line of key=value pairs;
// optionally a finer CSV curve for plots. Loads a model directory, or a running
// trainer's checkpoint.safetensors with --checkpoint.
#include <ATen/Parallel.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/strings/str_format.h"
#include "server/config/flag_set.h"
#include "server/model/hf_config.h"
#include "server/trainer/corpus.h"
#include "server/trainer/position_eval.h"
#include "server/trainer/trainer.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string model_dir;
  bool checkpoint = false;
  std::string corpus;
  int64_t length = 16384;
  int64_t stride = 0;
  int stretches = 0;
  std::string buckets = "0,128,512,1024,4096,16384";
  std::string curve_csv;
  int threads = 1;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("model_dir", &f->model_dir, "Model directory. Required.");
  flags->Add("checkpoint", &f->checkpoint,
             "Load --model_dir/config.json with the weights of "
             "--model_dir/checkpoint.safetensors (a training run that has not finished) "
             "instead of model.safetensors.");
  flags->Add("corpus", &f->corpus,
             "Corpus file (its validation split is used). Required.");
  flags->Add("length", &f->length, "Bytes of context per stretch.");
  flags->Add("stride", &f->stride,
             "Bytes between the starts of consecutive stretches (0: --length + 1, "
             "non-overlapping; less than --length: overlapping stretches, more samples "
             "for the short buckets).");
  flags->Add("stretches", &f->stretches,
             "Stretches to evaluate (0: every whole one in the split).");
  flags->Add("buckets", &f->buckets,
             "Bucket bounds (bytes of context) for the key=value line.");
  flags->Add("curve_csv", &f->curve_csv,
             "Also write the mean loss in power-of-two buckets (0-16, 16-32, ...) to this CSV.");
  flags->Add("threads", &f->threads, "LibTorch intra-op threads.");
}

using attnserve::trainer::PositionBuckets;

absl::StatusOr<std::unique_ptr<attnserve::model::Model>> LoadModel(const std::string& dir,
                                                                   bool checkpoint) {
  if (!checkpoint) return attnserve::model::Model::Load(dir);
  auto config = attnserve::model::ReadHfConfigFile(dir + "/" + attnserve::model::kHfConfigFile,
                                                   std::filesystem::path(dir).filename());
  if (!config.ok()) return config.status();
  return attnserve::trainer::LoadCheckpoint(*config,
                                            dir + "/" + attnserve::trainer::kCheckpointFile);
}

int Fail(const absl::Status& s) {
  std::cerr << "attnserve_position_eval: " << s.message() << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Loss by position along long contexts (validation text, serving path).\n"
      "Usage: attnserve_position_eval --model_dir=DIR --corpus=FILE [--length=16384]");
  at::set_num_threads(flags.threads);
  auto model = LoadModel(flags.model_dir, flags.checkpoint);
  if (!model.ok()) return Fail(model.status());
  attnserve::trainer::PositionEvalOptions o;
  o.length = flags.length;
  o.stride = flags.stride;
  o.stretches = flags.stretches;
  auto corpus = attnserve::trainer::LoadCorpus(flags.corpus, o.length + 1);
  if (!corpus.ok()) return Fail(corpus.status());
  auto table = PositionBuckets::Parse(flags.buckets);
  if (!table.ok()) return Fail(table.status());
  int64_t curve_end = 16;
  while (curve_end < o.length) curve_end *= 2;
  auto curve = PositionBuckets::Create(PositionBuckets::PowerOfTwoBounds(curve_end)).value();
  auto stretches = attnserve::trainer::LossByPosition(**model, corpus->validation, o,
                                                      {&*table, &curve});
  if (!stretches.ok()) return Fail(stretches.status());
  const auto& c = (*model)->config();
  std::cout << absl::StrFormat(
      "model=%s attention=%s order=%d stretches=%d length=%d stride=%d", c.name,
      c.attention.module, c.attention.module.rfind("taylor", 0) == 0 ? c.attention.order : 0,
      *stretches, o.length, o.stride == 0 ? o.length + 1 : o.stride);
  for (int i = 0; i < table->size(); ++i) {
    std::cout << absl::StrFormat(" bpb_%s=%.4f", table->Label(i), table->mean(i) / std::log(2.0));
  }
  std::cout << "\n";
  if (const std::string path = flags.curve_csv; !path.empty()) {
    std::ofstream csv(path, std::ios::trunc);
    csv << "from,to,count,loss_nats,bpb\n";
    for (int i = 0; i < curve.size(); ++i) {
      if (curve.count(i) == 0) continue;
      csv << absl::StrFormat("%d,%d,%d,%.5f,%.5f\n", curve.lower(i), curve.upper(i),
                             curve.count(i), curve.mean(i), curve.mean(i) / std::log(2.0));
    }
    if (!csv.flush()) return Fail(absl::InternalError("cannot write " + path));
  }
  return 0;
}
