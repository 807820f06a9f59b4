// attnserve_eval: validation loss and decode speed of a model directory, optionally
// served with another attention module (e.g. a softmax + qk_norm checkpoint as taylor).
// Prints one line of key=value pairs.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cmath>
#include <iostream>

#include "absl/strings/str_format.h"
#include "server/config/flag_set.h"
#include "server/trainer/corpus.h"
#include "server/trainer/trainer.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string model_dir;
  std::string corpus;
  std::string attention;
  int order = 0;
  int seq_len = 128;
  int batch = 32;
  int eval_batches = 8;
  int decode_tokens = 256;
  int threads = 1;
  int64_t max_state_mib = 64;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("model_dir", &f->model_dir, "Model directory. Required.");
  flags->Add("corpus", &f->corpus,
             "Corpus file (its validation split is used). Required.");
  flags->Add("attention", &f->attention,
             "Serve with this module instead (must be compatible).");
  flags->Add("order", &f->order, "Order for --attention (taylor, taylor_norm).");
  flags->Add("seq_len", &f->seq_len, "Bytes per validation window.");
  flags->Add("batch", &f->batch, "Windows per batch.");
  flags->Add("eval_batches", &f->eval_batches, "Validation batches.");
  flags->Add("decode_tokens", &f->decode_tokens,
             "Tokens to decode for the speed figure (0: skip).");
  flags->Add("threads", &f->threads, "LibTorch intra-op threads.");
  flags->Add("max_state_mib", &f->max_state_mib,
             "Largest fixed state per session per layer, MiB (high Taylor orders need more).");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Validation loss and decode speed of a model directory.\n"
      "Usage: attnserve_eval --model_dir=DIR --corpus=FILE [--attention=taylor --order=4]");
  at::set_num_threads(flags.threads);
  const std::string dir = flags.model_dir;
  attnserve::model::LoadOptions load;
  load.attention_module = flags.attention;
  load.attention_order = flags.order;
  load.max_state_bytes_per_layer = flags.max_state_mib << 20;
  auto model = attnserve::model::Model::Load(dir, load);
  if (!model.ok()) {
    std::cerr << "attnserve_eval: " << model.status().message() << "\n";
    return 1;
  }
  const int seq_len = flags.seq_len;
  auto corpus = attnserve::trainer::LoadCorpus(flags.corpus, seq_len + 1);
  if (!corpus.ok()) {
    std::cerr << "attnserve_eval: " << corpus.status().message() << "\n";
    return 1;
  }
  const attnserve::model::Model& m = **model;
  const double loss = attnserve::trainer::Evaluate(m, corpus->validation, seq_len,
                                                   flags.eval_batches,
                                                   flags.batch);
  // Decode speed: one session after a 1,024-byte prompt, greedy, timed per token.
  double tok_s = 0;
  if (const int n = flags.decode_tokens; n > 0) {
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
