// Trains a model config on a byte corpus: AdamW, linear warm-up then cosine decay,
// gradient clipping, a fixed seed, the parallel attention path. Writes a model
// directory the server loads as is, a CSV log, and a checkpoint to resume from.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "server/model/model.h"

namespace attnserve::trainer {

// A run's checkpoint in out_dir: safetensors (model/safetensors.h) holding the parameters
// by internal name (Model::NamedParameters), "adam_m." and "adam_v." + each, and "step".
inline constexpr char kCheckpointFile[] = "checkpoint.safetensors";

struct TrainOptions {
  // Where to write the model directory (config.json, model.safetensors), train_log.csv,
  // report.txt, train_command.txt and checkpoint.safetensors.
  std::string out_dir;
  std::string corpus_path;
  // Optimiser steps, sequences per step, tokens per sequence.
  int steps = 2000;
  int batch = 16;
  int seq_len = 256;
  // Curriculum: the first `short_steps` steps train on windows of `short_seq_len` bytes,
  // batch * seq_len / short_seq_len of them (the same bytes per step); validation always
  // uses seq_len. 0 for either: no curriculum.
  int short_seq_len = 0;
  int short_steps = 0;
  // Peak learning rate, reached after `warmup` steps; cosine decay to lr * min_lr_ratio.
  double lr = 3e-3;
  double min_lr_ratio = 0.1;
  int warmup = 100;
  double weight_decay = 0.1;  // on matrices only, not on gains or the temperature
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double clip = 1.0;          // global gradient-norm clip
  uint64_t seed = 1;          // initial weights and batch order
  // Validation every `eval_every` steps over `eval_batches` fixed windows.
  int eval_every = 200;
  int eval_batches = 8;
  int checkpoint_every = 200;
  int threads = 2;
  // Continue from out_dir/checkpoint.safetensors when it exists.
  bool resume = false;
  // Start from the weights of this model directory (Model::Load; the shapes must fit
  // the config, which may differ in options without weights, such as a decay) instead of
  // a random initialisation: fine-tuning. Ignored when resuming from a checkpoint.
  std::string init_from;
  // Stop after this step (0: run to `steps`), leaving a checkpoint to resume from; the
  // schedule still spans `steps`. For splitting a run across sessions.
  int stop_after = 0;
  // The exact command line, recorded in train_command.txt.
  std::string command;
};

// One line of progress for the terminal (the trainer binary prints it).
struct Progress {
  int step = 0;
  int steps = 0;
  double train_loss = 0;
  double val_loss = -1;  // < 0 when not evaluated at this step
  int seq_len = 0;  // training window of this step (the curriculum may shorten it)
  // Over the steps run so far at this step's window length.
  double tokens_per_second = 0;
  // Remaining steps at the current step time (an underestimate during a curriculum's
  // short phase).
  double eta_seconds = 0;
};

// Validation loss (mean cross-entropy, nats per byte) of `model` on fixed windows of
// `text`: `batches` x `batch` windows of seq_len + 1 bytes spread evenly.
double Evaluate(const model::Model& model, const std::string& text, int seq_len,
                int batches, int batch);

// A model of `config` with the weights of a trainer checkpoint (kCheckpointFile),
// for evaluating a run that has not finished. Errors: unreadable checkpoint, or one
// that does not fit the config.
absl::StatusOr<std::unique_ptr<model::Model>> LoadCheckpoint(const model::ModelConfig& config,
                                                             const std::string& path);

// Trains `config` (a byte model: an empty tokenizer_class becomes kByteTokenizerClass)
// as `options` say. Writes out_dir/config.json at the start (so a
// running job's checkpoint can be loaded with LoadCheckpoint). Errors: a missing, empty
// or too short corpus; an invalid config or curriculum; a checkpoint that does not fit
// the config; unwritable output.
absl::Status Train(const model::ModelConfig& config, const TrainOptions& options,
                   const std::function<void(const Progress&)>& on_progress);

}  // namespace attnserve::trainer
