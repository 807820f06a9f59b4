// attnserve_convert: rewrites a model directory of the old layout (config.pbtxt +
// weights.bin) as config.json + model.safetensors, the layout attnserve_server reads,
// and checks that the converted model is the same one: equal fingerprints (so saved
// sessions stay valid) and equal logits.
#include <cstdio>
#include <iostream>
#include <string>

#include "server/config/flag_set.h"
#include "server/tools/convert.h"

namespace {

// Command-line flags, parsed by attnserve::config::FlagSet in main().
struct Flags {
  std::string from;  // the old directory
  std::string to;    // where to write; empty: `from` itself
};

std::string Hex(const attnserve::Sha256Digest& d) {
  std::string out;
  for (unsigned char c : d) {
    char b[3];
    std::snprintf(b, sizeof b, "%02x", c);
    out += b;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  attnserve::config::FlagSet flag_set;
  flag_set.Add("from", &flags.from,
               "Model directory in the old layout (config.pbtxt + weights.bin). Required.");
  flag_set.Add("to", &flags.to,
               "Directory to write config.json + model.safetensors into (created if "
               "missing); empty: --from itself, whose old files are then left to delete.");
  attnserve::config::ParseFlagsOrExit(
      flag_set, argc, argv,
      "Converts an old attnserve model directory to the Hugging Face layout.\n"
      "Usage: attnserve_convert --from=OLD_DIR [--to=NEW_DIR]");
  if (flags.from.empty()) {
    std::cerr << "attnserve_convert: --from is required\n";
    return 2;
  }
  const std::string to = flags.to.empty() ? flags.from : flags.to;
  auto report = attnserve::tools::ConvertLegacyModelDir(flags.from, to);
  if (!report.ok()) {
    std::cerr << "attnserve_convert: " << report.status().message() << "\n";
    return 1;
  }
  const bool same = report->fingerprint_before == report->fingerprint_after &&
                    report->max_logit_difference == 0;
  std::cout << "attnserve_convert: " << report->name << ": " << flags.from << " -> " << to
            << "\n  fingerprint before " << Hex(report->fingerprint_before)
            << "\n  fingerprint after  " << Hex(report->fingerprint_after)
            << "\n  max |logit difference| " << report->max_logit_difference << "\n";
  if (!same) {
    std::cerr << "attnserve_convert: the converted model differs from the old one\n";
    return 1;
  }
  return 0;
}
