// attnserve_eval: validation loss and decode speed of a model directory, optionally
// served with another attention module (e.g. a softmax + qk_norm checkpoint as taylor).
// Prints one line of key=value pairs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "server/trainer/corpus.h"
#include "server/trainer/trainer.h"

ABSL_FLAG(std::string, model_dir, "", "Model directory. Required.");
ABSL_FLAG(std::string, corpus, "", "Corpus file (its validation split is used). Required.");
ABSL_FLAG(std::string, attention, "", "Serve with this module instead (must be compatible).");
ABSL_FLAG(int, order, 0, "Order for --attention (taylor, taylor_norm).");
ABSL_FLAG(int, seq_len, 128, "Bytes per validation window.");
ABSL_FLAG(int, batch, 32, "Windows per batch.");
ABSL_FLAG(int, eval_batches, 8, "Validation batches.");
ABSL_FLAG(int, decode_tokens, 256, "Tokens to decode for the speed figure (0: skip).");
ABSL_FLAG(int, threads, 1, "LibTorch intra-op threads.");
ABSL_FLAG(int64_t, max_state_mib, 64,
          "Largest fixed state per session per layer, MiB (high Taylor orders need more).");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Validation loss and decode speed of a model directory.\n"
      "Usage: attnserve_eval --model_dir=DIR --corpus=FILE [--attention=taylor --order=4]");
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  const std::string dir = absl::GetFlag(FLAGS_model_dir);
  attnserve::model::LoadOptions load;
  load.attention_module = absl::GetFlag(FLAGS_attention);
  load.attention_order = absl::GetFlag(FLAGS_order);
  load.max_state_bytes_per_layer = absl::GetFlag(FLAGS_max_state_mib) << 20;
  auto model = attnserve::model::Model::Load(dir, load);
  if (!model.ok()) {
    std::cerr << "attnserve_eval: " << model.status().message() << "\n";
    return 1;
  }
  const int seq_len = absl::GetFlag(FLAGS_seq_len);
  auto corpus = attnserve::trainer::LoadCorpus(absl::GetFlag(FLAGS_corpus), seq_len + 1);
  if (!corpus.ok()) {
    std::cerr << "attnserve_eval: " << corpus.status().message() << "\n";
    return 1;
  }
  const attnserve::model::Model& m = **model;
  const double loss = attnserve::trainer::Evaluate(m, corpus->validation, seq_len,
                                                   absl::GetFlag(FLAGS_eval_batches),
                                                   absl::GetFlag(FLAGS_batch));
  // Decode speed: one session after a 1,024-byte prompt, greedy, timed per token.
  double tok_s = 0;
  if (const int n = absl::GetFlag(FLAGS_decode_tokens); n > 0) {
    auto state = m.NewState();
    std::vector<int32_t> prompt;
    for (int i = 0; i < 1024; ++i) prompt.push_back((unsigned char)corpus->validation[i]);
    at::Tensor logits = m.Prefill(*state, prompt).value()[-1];
    attnserve::model::DecodeState* states[] = {state.get()};
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      const int32_t id = int32_t(logits.argmax().item<int64_t>());
      logits = m.Step(states, {id}).value()[0];
    }
    tok_s = n / std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const auto& a = m.config().attention;
  std::cout << absl::StrFormat(
      "model=%s attention=%s order=%d val_loss=%.4f val_bpb=%.4f state_bytes_1k=%d "
      "state_bytes_16k=%d decode_tok_s=%.0f\n",
      m.config().name, a.module, a.module.rfind("taylor", 0) == 0 ? a.order : 0, loss,
      loss / std::log(2.0), m.StateBytes(1024), m.StateBytes(16384), tok_s);
  return 0;
}
