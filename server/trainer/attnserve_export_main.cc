// attnserve_export: turns a training run's checkpoint into a model directory the server
// loads (config.json + model.safetensors), e.g. to sample from or serve a run that has not
// finished. The run's own directory is left as it is.
#include <filesystem>
#include <iostream>

#include "server/config/flag_set.h"
#include "server/model/hf_config.h"
#include "server/trainer/trainer.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main(); the
// initialisers are the defaults. No environment mirrors: ATTNSERVE_* variables
// configure the server and the client, and a tool should do what its command
// line says.
struct Flags {
  std::string run_dir;
  std::string out;
};

// Binds every field of `f` to its flag on `flags`.
void DeclareFlags(Flags* f, attnserve::config::FlagSet* flags) {
  flags->Add("run_dir", &f->run_dir,
             "Training output directory holding config.json and checkpoint.safetensors. "
             "Required.");
  flags->Add("out", &f->out, "Model directory to write. Required.");
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  DeclareFlags(&flags, &flag_set);
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Exports a trainer checkpoint as a model directory.\n"
      "Usage: attnserve_export --run_dir=deploy/models/NAME --out=/tmp/NAME-stepN");
  const std::string run = flags.run_dir, out = flags.out;
  if (run.empty() || out.empty()) {
    std::cerr << "attnserve_export: --run_dir and --out are required (see --help)\n";
    return 2;
  }
  auto config = attnserve::model::ReadHfConfigFile(
      run + "/" + attnserve::model::kHfConfigFile, std::filesystem::path(run).filename());
  if (!config.ok()) {
    std::cerr << "attnserve_export: " << config.status().message() << "\n";
    return 1;
  }
  auto model =
      attnserve::trainer::LoadCheckpoint(*config, run + "/" + attnserve::trainer::kCheckpointFile);
  absl::Status s = model.ok() ? (*model)->Save(out) : model.status();
  if (!s.ok()) {
    std::cerr << "attnserve_export: " << s.message() << "\n";
    return 1;
  }
  std::cout << "attnserve_export: wrote " << out << "\n";
  return 0;
}
