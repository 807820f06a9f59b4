// attnserve_demo: builds a small model for each attention module and streams generated
// text from it to the terminal, with the per-session state size and decode speed.
// The weights are random, so the text is noise: the demo shows the machinery of every
// module side by side (prefill, step decode, sampling, fixed vs growing state), not
// language. Trained models are in deploy/models/ and served by attnserve_server.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "server/config/flag_set.h"
#include "server/model/model.h"
#include "server/model/sampler.h"
#include "server/model/tokenizer.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string modules = "softmax,softmax_norm,taylor,taylor_norm,linear";
  int order = 2;
  std::string prompt = "In the beginning God created the heaven and the earth.";
  int tokens = 80;
  float temperature = 0.8f;
  int top_k = 0;
  float top_p = 0.95f;
  uint64_t seed = 1;
  int threads = 1;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("modules", &f->modules, "Comma-separated attention modules to demonstrate.");
  flags->Add("order", &f->order, "Taylor order for taylor and taylor_norm.");
  flags->Add("prompt", &f->prompt, "Prompt text (bytes).");
  flags->Add("tokens", &f->tokens, "Tokens to generate per module.");
  flags->Add("temperature", &f->temperature, "Sampling temperature; 0 is greedy.");
  flags->Add("top_k", &f->top_k, "Top-k filter; 0 keeps every token.");
  flags->Add("top_p", &f->top_p, "Top-p (nucleus) filter in (0, 1].");
  flags->Add("seed", &f->seed, "Seed for the weights and the sampler.");
  flags->Add("threads", &f->threads, "LibTorch intra-op threads.");
}

using attnserve::model::Model;

// Printable ASCII and newlines pass through; any other byte is shown as \xNN so random
// weights cannot send control sequences to the terminal.
std::string Printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c == '\n' || (c >= 0x20 && c < 0x7f)) {
      out.push_back(char(c));
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

int Demo(const std::string& module, const Flags& flags) {
  attnserve::model::ModelConfig config;
  config.name = "demo-" + module;
  config.dim = 64;
  config.num_layers = 2;
  config.mlp_hidden = 192;
  config.attention.module = module;
  config.attention.order = flags.order;
  config.attention.num_heads = 4;
  config.attention.num_kv_heads = 4;
  config.attention.head_dim = 16;
  config.attention.value_dim = 16;
  auto model = Model::Create(config, flags.seed);
  if (!model.ok()) {
    std::cerr << "attnserve_demo: " << module << ": " << model.status().message() << "\n";
    return 1;
  }
  auto sampler = attnserve::model::Sampler::Create(
      {flags.temperature, flags.top_k,
       flags.top_p, flags.seed});
  if (!sampler.ok()) {
    std::cerr << "attnserve_demo: " << sampler.status().message() << "\n";
    return 1;
  }
  const std::string prompt = flags.prompt;
  std::cout << "== " << module
            << (module.rfind("taylor", 0) == 0 ? " (order " + std::to_string(config.attention.order) + ")" : "")
            << ": " << (*model)->ParameterCount() << " parameters, random weights\n"
            << Printable(prompt) << std::flush;
  auto state = (*model)->NewState();
  auto logits = (*model)->Prefill(*state, attnserve::model::Encode(prompt));
  if (!logits.ok()) {
    std::cerr << "\nattnserve_demo: " << logits.status().message() << "\n";
    return 1;
  }
  at::Tensor row = (*logits)[-1].contiguous();
  attnserve::model::DecodeState* states[] = {state.get()};
  const auto start = std::chrono::steady_clock::now();
  int generated = 0;
  for (; generated < flags.tokens; ++generated) {
    const int32_t id = (*sampler)->Sample({row.data_ptr<float>(), size_t(row.numel())});
    if (id == attnserve::model::kEosToken) break;
    std::cout << Printable(attnserve::model::TokenBytes(id)) << std::flush;
    auto next = (*model)->Step(states, {id});
    if (!next.ok()) {
      std::cerr << "\nattnserve_demo: " << next.status().message() << "\n";
      return 1;
    }
    row = (*next)[0].contiguous();
  }
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t break_even = (*model)->BreakEvenContext();
  std::cout << "\n-- " << generated << " tokens, " << int(generated / secs)
            << " tokens/s; state " << state->Bytes() << " bytes at position "
            << state->position() << " ("
            << (break_even > 0 ? "fixed; smaller than a KV cache from " +
                                     std::to_string(break_even) + " tokens"
                               : std::string("KV cache, grows with every token"))
            << ")\n\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Streams text from a small model for each attention module.\n"
      "Weights are random, so the text is noise; trained models: deploy/models/.\n"
      "Usage: attnserve_demo [--modules=taylor,softmax] [--tokens=80] [...]");
  at::set_num_threads(flags.threads);
  int rc = 0;
  for (const std::string& module : std::vector<std::string>(
           absl::StrSplit(flags.modules, ',', absl::SkipEmpty()))) {
    rc |= Demo(module, flags);
  }
  return rc;
}
