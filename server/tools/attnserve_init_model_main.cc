// attnserve_init_model: writes a model directory (config.pbtxt + weights.bin) with
// freshly initialised, untrained weights. The build uses it to give the server a model
// to load before trained checkpoints exist; tests use it for small models.
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "server/model/model.h"

ABSL_FLAG(std::string, out, "", "Directory to write (created if missing). Required.");
ABSL_FLAG(std::string, name, "default-untrained", "Model name clients use.");
ABSL_FLAG(std::string, attention, "taylor",
          "Attention module: softmax, softmax_norm, taylor, taylor_norm, linear.");
ABSL_FLAG(int, order, 2, "Taylor order (taylor, taylor_norm).");
ABSL_FLAG(int, dim, 64, "Residual width (num_heads * head_dim).");
ABSL_FLAG(int, heads, 4, "Attention heads.");
ABSL_FLAG(int, layers, 2, "Decoder blocks.");
ABSL_FLAG(int, mlp_hidden, 192, "SwiGLU hidden width.");
ABSL_FLAG(uint64_t, seed, 1, "Initialisation seed.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes an untrained model directory the server can load.\n"
      "Usage: attnserve_init_model --out=DIR [--attention=taylor --order=2 ...]");
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::cerr << "attnserve_init_model: --out is required\n";
    return 2;
  }
  attnserve::model::ModelConfig c;
  c.name = absl::GetFlag(FLAGS_name);
  c.dim = absl::GetFlag(FLAGS_dim);
  c.num_layers = absl::GetFlag(FLAGS_layers);
  c.mlp_hidden = absl::GetFlag(FLAGS_mlp_hidden);
  c.attention.module = absl::GetFlag(FLAGS_attention);
  c.attention.order = absl::GetFlag(FLAGS_order);
  c.attention.num_heads = absl::GetFlag(FLAGS_heads);
  c.attention.head_dim = c.attention.num_heads > 0 ? c.dim / c.attention.num_heads : 0;
  c.attention.value_dim = c.attention.head_dim;
  auto model = attnserve::model::Model::Create(c, absl::GetFlag(FLAGS_seed));
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
