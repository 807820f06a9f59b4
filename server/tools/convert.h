// Converts a model directory of the layout before issue 19 (config.pbtxt in ModelConfig
// text format + weights.bin, legacy_weights.h) into the Hugging Face layout Model::Load
// reads (config.json + model.safetensors), and proves the result is the same model.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/common/sha256.h"

namespace attnserve::tools {

struct ConversionReport {
  std::string name;  // the model's name
  // Model::Fingerprint of the old directory's model and of the converted one, loaded back.
  Sha256Digest fingerprint_before{}, fingerprint_after{};
  // Largest |logit difference| between the two on a fixed 64-byte text (Forward).
  double max_logit_difference = 0;
};

// Reads `from`/config.pbtxt and `from`/weights.bin exactly as the old Model::Load did
// (every parameter present with the config's shape, nothing else), writes `to` with
// Model::Save (created if missing; `to` may be `from`, whose old files are then left
// for the caller to delete), loads `to` back and compares. Old directories hold byte
// models: the config gets tokenizer_class AttnServeByteTokenizer. Errors name the file.
absl::StatusOr<ConversionReport> ConvertLegacyModelDir(const std::string& from,
                                                       const std::string& to);

}  // namespace attnserve::tools
