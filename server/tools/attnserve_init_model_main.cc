// attnserve_init_model: writes a model directory (config.json + model.safetensors) with
// freshly initialised, untrained weights: the benchmarks' models of a chosen shape
// (tests/bench), and any shape to try the server on before training one.
#include <iostream>
#include <string>

#include "server/config/flag_set.h"
#include "server/model/model.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string out;
  std::string name = "default-untrained";
  std::string attention = "taylor";
  int order = 2;
  int dim = 64;
  int heads = 4;
  int kv_heads = 0;
  int head_dim = 0;
  int layers = 2;
  int mlp_hidden = 192;
  uint64_t seed = 1;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("out", &f->out, "Directory to write (created if missing). Required.");
  flags->Add("name", &f->name, "Model name clients use.");
  flags->Add("attention", &f->attention,
             "Attention module: softmax, softmax_norm, taylor, taylor_norm, linear.");
  flags->Add("order", &f->order, "Taylor order (taylor, taylor_norm).");
  flags->Add("dim", &f->dim, "Residual width.");
  flags->Add("heads", &f->heads, "Attention (query) heads.");
  flags->Add("kv_heads", &f->kv_heads,
             "Key/value heads (grouped-query attention; divides --heads); 0: --heads.");
  flags->Add("head_dim", &f->head_dim, "Per-head dimension; 0: --dim / --heads.");
  flags->Add("layers", &f->layers, "Decoder blocks.");
  flags->Add("mlp_hidden", &f->mlp_hidden, "SwiGLU hidden width.");
  flags->Add("seed", &f->seed, "Initialisation seed.");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Writes an untrained model directory the server can load.\n"
      "Usage: attnserve_init_model --out=DIR [--attention=taylor --order=2 ...]");
  const std::string out = flags.out;
  if (out.empty()) {
    std::cerr << "attnserve_init_model: --out is required\n";
    return 2;
  }
  attnserve::model::ModelConfig c;
  c.name = flags.name;
  c.dim = flags.dim;
  c.num_layers = flags.layers;
  c.mlp_hidden = flags.mlp_hidden;
  c.attention.module = flags.attention;
  c.attention.order = flags.order;
  c.attention.num_heads = flags.heads;
  c.attention.num_kv_heads = flags.kv_heads > 0 ? flags.kv_heads : flags.heads;
  c.attention.head_dim = flags.head_dim > 0           ? flags.head_dim
                         : c.attention.num_heads > 0 ? c.dim / c.attention.num_heads
                                                     : 0;
  c.attention.value_dim = c.attention.head_dim;
  c.tokenizer_class = attnserve::model::kByteTokenizerClass;
  auto model = attnserve::model::Model::Create(c, flags.seed);
  if (!model.ok()) {
    std::cerr << "attnserve_init_model: " << model.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = (*model)->Save(out); !s.ok()) {
    std::cerr << "attnserve_init_model: " << s.message() << "\n";
    return 1;
  }
  std::cout << "wrote untrained model '" << c.name << "' (" << c.attention.module << ", "
            << (*model)->ParameterCount() << " parameters) to " << out << "\n";
  return 0;
}
