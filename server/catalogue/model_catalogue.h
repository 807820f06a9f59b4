// The model catalogue: every model a server hosts, by name, with the variants that serve
// the same weights through another attention module (sharing the weight tensors), and
// lookup by fingerprint for snapshots. The one owner of names, variants and servable
// swaps; the service and the session store both read it. Immutable after construction,
// so any thread may read it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/common/sha256.h"
#include "server/catalogue/served_model.h"

namespace attnserve::catalogue {

class ModelCatalogue {
 public:
  // Loads every directory with model::Model::Load and tokenizer::LoadTokenizer (its
  // refusals are this call's) and adds, for each, the variants its
  // weights may be served as (attention::CheckServableAs decides; taylor and
  // taylor_norm of orders 2, 4, 6 whose state fits the per-layer budget). Duplicate
  // model names and an empty list are INVALID_ARGUMENT.
  // `options` apply to every directory (its attention_module and order are ignored).
  static absl::StatusOr<std::unique_ptr<ModelCatalogue>> Load(
      const std::vector<std::string>& dirs, const model::LoadOptions& options = {});

  // `models` in order; the first is the default.
  explicit ModelCatalogue(std::vector<std::shared_ptr<const ServedModel>> models);

  // Empty name -> the default model. NOT_FOUND naming the served models.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Find(const std::string& name) const;

  // The model `name` (empty: default) served with attention `module` (empty: its own)
  // of `order` (0: any). NOT_FOUND for an unknown name; INVALID_ARGUMENT listing what
  // the model can be served as otherwise.
  absl::StatusOr<std::shared_ptr<const ServedModel>> Resolve(const std::string& name,
                                                             const std::string& module,
                                                             int order) const;

  // The model or variant whose Model::Fingerprint() is `fingerprint`; null if none.
  std::shared_ptr<const ServedModel> FindByFingerprint(const Sha256Digest& fingerprint) const;

  // Base models in order (variants hang off each).
  const std::vector<std::shared_ptr<const ServedModel>>& all() const { return models_; }

 private:
  std::vector<std::shared_ptr<const ServedModel>> models_;
};

}  // namespace attnserve::catalogue
