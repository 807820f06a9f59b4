// attnserve_train: trains a model config on a byte corpus and writes a model
// directory attnserve_server loads as is. Shows step, loss, tokens/s and ETA
// while it runs; the CSV log, the report and the exact command land in --out.
#include <fstream>
#include <iostream>
#include <sstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "server/trainer/trainer.h"

ABSL_FLAG(std::string, config, "",
          "Model config (ModelConfig text format). Required.");
ABSL_FLAG(std::string, corpus, "", "Training text file (bytes). Required.");
ABSL_FLAG(std::string, out, "", "Output model directory. Required.");
ABSL_FLAG(int, steps, 2000, "Optimiser steps.");
ABSL_FLAG(int, batch, 16, "Sequences per step.");
ABSL_FLAG(int, seq_len, 256, "Bytes per sequence.");
ABSL_FLAG(double, lr, 3e-3, "Peak learning rate (AdamW).");
ABSL_FLAG(int, warmup, 100, "Linear warm-up steps before the cosine decay.");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay on matrices.");
ABSL_FLAG(double, clip, 1.0, "Global gradient-norm clip.");
ABSL_FLAG(uint64_t, seed, 1,
          "Seed for the initial weights and the batch order.");
ABSL_FLAG(int, eval_every, 200, "Steps between validation evaluations.");
ABSL_FLAG(int, eval_batches, 8, "Validation batches per evaluation.");
ABSL_FLAG(int, checkpoint_every, 200, "Steps between checkpoints.");
ABSL_FLAG(int, print_every, 20, "Steps between progress lines.");
ABSL_FLAG(int, threads, 2, "LibTorch intra-op threads.");
ABSL_FLAG(bool, resume, false,
          "Continue from --out/checkpoint.bin if it exists.");
ABSL_FLAG(int, stop_after, 0,
          "Stop after this step, leaving a checkpoint for --resume (0: run to "
          "--steps).");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Trains a model on a byte corpus.\n"
      "Usage: attnserve_train --config=model.pbtxt --corpus=kjv.txt --out=DIR "
      "[--steps=N]");
  std::vector<std::string> args(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  for (const auto& [name, value] : {std::pair<const char*, std::string>{
                                        "config", absl::GetFlag(FLAGS_config)},
                                    {"corpus", absl::GetFlag(FLAGS_corpus)},
                                    {"out", absl::GetFlag(FLAGS_out)}}) {
    if (value.empty()) {
      std::cerr << "attnserve_train: --" << name
                << " is required (see --help)\n";
      return 2;
    }
  }
  std::ifstream f(absl::GetFlag(FLAGS_config));
  if (!f) {
    std::cerr << "attnserve_train: cannot open config "
              << absl::GetFlag(FLAGS_config) << "\n";
    return 2;
  }
  std::stringstream text;
  text << f.rdbuf();
  auto config = attnserve::model::ParseModelConfig(text.str());
  if (!config.ok()) {
    std::cerr << "attnserve_train: " << absl::GetFlag(FLAGS_config) << ": "
              << config.status().message() << "\n";
    return 2;
  }
  attnserve::trainer::TrainOptions o;
  o.out_dir = absl::GetFlag(FLAGS_out);
  o.corpus_path = absl::GetFlag(FLAGS_corpus);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.batch = absl::GetFlag(FLAGS_batch);
  o.seq_len = absl::GetFlag(FLAGS_seq_len);
  o.lr = absl::GetFlag(FLAGS_lr);
  o.warmup = absl::GetFlag(FLAGS_warmup);
  o.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  o.clip = absl::GetFlag(FLAGS_clip);
  o.seed = absl::GetFlag(FLAGS_seed);
  o.eval_every = absl::GetFlag(FLAGS_eval_every);
  o.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  o.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  o.threads = absl::GetFlag(FLAGS_threads);
  o.resume = absl::GetFlag(FLAGS_resume);
  o.stop_after = absl::GetFlag(FLAGS_stop_after);
  o.command = absl::StrJoin(args, " ");
  const int print_every = std::max(1, absl::GetFlag(FLAGS_print_every));
  absl::Status s = attnserve::trainer::Train(
      *config, o, [&](const attnserve::trainer::Progress& p) {
        if (p.step % print_every != 0 && p.val_loss < 0 && p.step != p.steps)
          return;
        std::cout << absl::StrFormat("step %5d/%d  loss %.4f", p.step, p.steps,
                                     p.train_loss);
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
