#include "server/tools/convert.h"

#include <ATen/ATen.h>

#include <fstream>
#include <sstream>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "server/common/torch_status.h"
#include "server/model/model.h"
#include "server/tools/legacy_weights.h"

namespace attnserve::tools {
namespace {

// The old Model::Load: config.pbtxt and weights.bin by internal names.
absl::StatusOr<std::unique_ptr<model::Model>> LoadLegacy(const std::string& dir) {
  const std::string config_path = dir + "/config.pbtxt";
  std::ifstream f(config_path);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open model config ", config_path));
  std::stringstream text;
  text << f.rdbuf();
  auto config = model::ParseModelConfig(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(config_path, ": ", config.status().message()));
  }
  config->tokenizer_class = model::kByteTokenizerClass;
  auto weights = ReadTensors(dir + "/weights.bin");
  if (!weights.ok()) return weights.status();
  auto created = model::Model::Create(*config, /*seed=*/0);
  if (!created.ok()) return created.status();
  std::unordered_map<std::string, at::Tensor> loaded(weights->begin(), weights->end());
  absl::Status copied = CatchTorch("loading weights", [&]() -> absl::Status {
    for (auto& [name, param] : (*created)->NamedParameters()) {
      auto it = loaded.find(name);
      if (it == loaded.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": weights.bin has no tensor '", name, "' for this config"));
      }
      if (it->second.sizes() != param.sizes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, ": tensor '", name, "' has shape ", c10::str(it->second.sizes()),
            ", the config needs ", c10::str(param.sizes())));
      }
      param.copy_(it->second);
      loaded.erase(it);
    }
    if (!loaded.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          dir, ": weights.bin has tensor '", loaded.begin()->first,
          "' that the config does not use (", loaded.size(), " unused in all)"));
    }
    return absl::OkStatus();
  });
  if (!copied.ok()) return copied;
  return created;
}

}  // namespace

absl::StatusOr<ConversionReport> ConvertLegacyModelDir(const std::string& from,
                                                       const std::string& to) {
  auto old = LoadLegacy(from);
  if (!old.ok()) return old.status();
  if (absl::Status s = (*old)->Save(to); !s.ok()) return s;
  auto converted = model::Model::Load(to);
  if (!converted.ok()) return converted.status();
  ConversionReport r;
  r.name = (*old)->config().name;
  r.fingerprint_before = (*old)->Fingerprint();
  r.fingerprint_after = (*converted)->Fingerprint();
  absl::Status compared = CatchTorch("comparing logits", [&]() -> absl::Status {
    c10::NoGradGuard no_grad;
    const std::string text = "In the beginning God created the heaven and the earth. And the";
    std::vector<int64_t> ids(text.begin(), text.end());
    at::Tensor tokens = at::tensor(ids, at::kLong).unsqueeze(0);  // (1, T)
    at::Tensor a = (*old)->Forward(tokens), b = (*converted)->Forward(tokens);  // (1, T, V)
    r.max_logit_difference = (a - b).abs().max().item<double>();
    return absl::OkStatus();
  });
  if (!compared.ok()) return compared;
  return r;
}

}  // namespace attnserve::tools
