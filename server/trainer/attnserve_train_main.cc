// attnserve_train: trains a model config on a byte corpus and writes a model
// directory attnserve_server loads as is. Shows step, loss, tokens/s and ETA
// while it runs; the CSV log, the report and the exact command land in --out.
#include <filesystem>
#include <iostream>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/config/flag_set.h"
#include "server/model/hf_config.h"
#include "server/trainer/trainer.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string config;
  std::string corpus;
  std::string out;
  int steps = 2000;
  int batch = 16;
  int seq_len = 256;
  int short_seq_len = 0;
  int short_steps = 0;
  double lr = 3e-3;
  int warmup = 100;
  double weight_decay = 0.1;
  double clip = 1.0;
  uint64_t seed = 1;
  int eval_every = 200;
  int eval_batches = 8;
  int checkpoint_every = 200;
  int print_every = 20;
  int threads = 2;
  bool resume = false;
  std::string init_from;
  int stop_after = 0;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("config", &f->config, "Model config: a config.json (server/model/hf_config.h), e.g. "
             "deploy/models/configs/kjv-taylor2.json. Required.");
  flags->Add("corpus", &f->corpus, "Training text file (bytes). Required.");
  flags->Add("out", &f->out, "Output model directory. Required.");
  flags->Add("steps", &f->steps, "Optimiser steps.");
  flags->Add("batch", &f->batch, "Sequences per step.");
  flags->Add("seq_len", &f->seq_len, "Bytes per sequence.");
  flags->Add("short_seq_len", &f->short_seq_len,
             "Curriculum: bytes per sequence for the first --short_steps steps (the "
             "batch grows to keep the bytes per step); 0: no curriculum.");
  flags->Add("short_steps", &f->short_steps,
             "Curriculum: steps trained at --short_seq_len.");
  flags->Add("lr", &f->lr, "Peak learning rate (AdamW).");
  flags->Add("warmup", &f->warmup, "Linear warm-up steps before the cosine decay.");
  flags->Add("weight_decay", &f->weight_decay, "AdamW weight decay on matrices.");
  flags->Add("clip", &f->clip, "Global gradient-norm clip.");
  flags->Add("seed", &f->seed, "Seed for the initial weights and the batch order.");
  flags->Add("eval_every", &f->eval_every, "Steps between validation evaluations.");
  flags->Add("eval_batches", &f->eval_batches, "Validation batches per evaluation.");
  flags->Add("checkpoint_every", &f->checkpoint_every, "Steps between checkpoints.");
  flags->Add("print_every", &f->print_every, "Steps between progress lines.");
  flags->Add("threads", &f->threads, "LibTorch intra-op threads.");
  flags->Add("resume", &f->resume, "Continue from --out/checkpoint.safetensors if it exists.");
  flags->Add("init_from", &f->init_from,
             "Start from the weights of this model directory (fine-tuning; its tensors "
             "must fit --config) instead of a random initialisation. Ignored when "
             "--resume finds a checkpoint.");
  flags->Add("stop_after", &f->stop_after,
             "Stop after this step, leaving a checkpoint for --resume (0: run to "
             "--steps).");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  std::vector<std::string> args(argv, argv + argc);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Trains a model on a byte corpus.\n"
      "Usage: attnserve_train --config=config.json --corpus=kjv.txt --out=DIR "
      "[--steps=N]");
  for (const auto& [name, value] : {std::pair<const char*, std::string>{
                                        "config", flags.config},
                                    {"corpus", flags.corpus},
                                    {"out", flags.out}}) {
    if (value.empty()) {
      std::cerr << "attnserve_train: --" << name
                << " is required (see --help)\n";
      return 2;
    }
  }
  auto config = attnserve::model::ReadHfConfigFile(
      flags.config, std::filesystem::path(flags.config).stem().string());
  if (!config.ok()) {
    std::cerr << "attnserve_train: " << config.status().message() << "\n";
    return 2;
  }
  attnserve::trainer::TrainOptions o;
  o.out_dir = flags.out;
  o.corpus_path = flags.corpus;
  o.steps = flags.steps;
  o.batch = flags.batch;
  o.seq_len = flags.seq_len;
  o.short_seq_len = flags.short_seq_len;
  o.short_steps = flags.short_steps;
  o.lr = flags.lr;
  o.warmup = flags.warmup;
  o.weight_decay = flags.weight_decay;
  o.clip = flags.clip;
  o.seed = flags.seed;
  o.eval_every = flags.eval_every;
  o.eval_batches = flags.eval_batches;
  o.checkpoint_every = flags.checkpoint_every;
  o.threads = flags.threads;
  o.resume = flags.resume;
  o.init_from = flags.init_from;
  o.stop_after = flags.stop_after;
  o.command = absl::StrJoin(args, " ");
  const int print_every = std::max(1, flags.print_every);
  absl::Status s = attnserve::trainer::Train(
      *config, o, [&](const attnserve::trainer::Progress& p) {
        if (p.step % print_every != 0 && p.val_loss < 0 && p.step != p.steps)
          return;
        std::cout << absl::StrFormat("step %5d/%d  len %d  loss %.4f", p.step, p.steps,
                                     p.seq_len, p.train_loss);
        if (p.val_loss >= 0) {
          std::cout << absl::StrFormat("  val %.4f (%.3f bpb)", p.val_loss,
                                       p.val_loss / std::log(2.0));
        }
        std::cout << absl::StrFormat(
                         "  %.0f tok/s  ETA %dm%02ds\n", p.tokens_per_second,
                         int(p.eta_seconds) / 60, int(p.eta_seconds) % 60)
                  << std::flush;
      });
  if (!s.ok()) {
    std::cerr << "attnserve_train: " << s.message() << "\n";
    return 1;
  }
  if (o.stop_after > 0 && o.stop_after < o.steps) {
    std::cout << "attnserve_train: stopped after step " << o.stop_after
              << "; continue with "
              << "--resume (checkpoint in " << o.out_dir << ")\n";
  } else {
    std::cout << "attnserve_train: wrote " << o.out_dir << "\n";
  }
  return 0;
}
