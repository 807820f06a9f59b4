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

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "server/model/model.h"
#include "server/model/sampler.h"
#include "server/model/tokenizer.h"

ABSL_FLAG(std::string, modules, "softmax,softmax_norm,taylor,taylor_norm,linear",
          "Comma-separated attention modules to demonstrate.");
ABSL_FLAG(int, order, 2, "Taylor order for taylor and taylor_norm.");
ABSL_FLAG(std::string, prompt, "In the beginning God created the heaven and the earth.",
          "Prompt text (bytes).");
ABSL_FLAG(int, tokens, 80, "Tokens to generate per module.");
ABSL_FLAG(float, temperature, 0.8f, "Sampling temperature; 0 is greedy.");
ABSL_FLAG(int, top_k, 0, "Top-k filter; 0 keeps every token.");
ABSL_FLAG(float, top_p, 0.95f, "Top-p (nucleus) filter in (0, 1].");
ABSL_FLAG(uint64_t, seed, 1, "Seed for the weights and the sampler.");
ABSL_FLAG(int, threads, 1, "LibTorch intra-op threads.");

namespace {

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

int Demo(const std::string& module) {
  attnserve::model::ModelConfig config;
  config.name = "demo-" + module;
  config.dim = 64;
  config.num_layers = 2;
  config.mlp_hidden = 192;
  config.attention.module = module;
  config.attention.order = absl::GetFlag(FLAGS_order);
  config.attention.num_heads = 4;
  config.attention.head_dim = 16;
  config.attention.value_dim = 16;
  auto model = Model::Create(config, absl::GetFlag(FLAGS_seed));
  if (!model.ok()) {
    std::cerr << "attnserve_demo: " << module << ": " << model.status().message() << "\n";
    return 1;
  }
  auto sampler = attnserve::model::Sampler::Create(
      {absl::GetFlag(FLAGS_temperature), absl::GetFlag(FLAGS_top_k),
       absl::GetFlag(FLAGS_top_p), absl::GetFlag(FLAGS_seed)});
  if (!sampler.ok()) {
    std::cerr << "attnserve_demo: " << sampler.status().message() << "\n";
    return 1;
  }
  const std::string prompt = absl::GetFlag(FLAGS_prompt);
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
  for (; generated < absl::GetFlag(FLAGS_tokens); ++generated) {
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
  absl::SetProgramUsageMessage(
      "Streams text from a small model for each attention module.\n"
      "Weights are random, so the text is noise; trained models: deploy/models/.\n"
      "Usage: attnserve_demo [--modules=taylor,softmax] [--tokens=80] [...]");
  absl::ParseCommandLine(argc, argv);
  at::set_num_threads(absl::GetFlag(FLAGS_threads));
  int rc = 0;
  for (const std::string& module : std::vector<std::string>(
           absl::StrSplit(absl::GetFlag(FLAGS_modules), ',', absl::SkipEmpty()))) {
    rc |= Demo(module);
  }
  return rc;
}
