#include "server/catalogue/model_catalogue.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/common/excerpt.h"
#include "server/model/gguf_model.h"
#include "server/tokenizer/gguf_vocab.h"

namespace attnserve::catalogue {

absl::StatusOr<std::unique_ptr<ModelCatalogue>> ModelCatalogue::Load(
    const std::vector<std::string>& dirs, const model::LoadOptions& options) {
  model::LoadOptions load = options;
  load.attention_module.clear();  // each model as trained; variants come from ServeAs
  load.attention_order = 0;
  std::vector<std::shared_ptr<const ServedModel>> out;
  std::set<std::string> names;
  for (const std::string& dir : dirs) {
    auto model = model::Model::Load(dir, load);
    if (!model.ok()) return model.status();
    const std::string name = (*model)->config().name;
    if (!names.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("model_dirs: two models are named '", name, "' (", dir, ")"));
    }
    auto tokenizer = model::IsGgufPath(dir)
                         ? tokenizer::LoadGgufTokenizer(dir, (*model)->config())
                         : tokenizer::LoadTokenizer(dir, (*model)->config());
    if (!tokenizer.ok()) return tokenizer.status();
    auto served = std::make_shared<ServedModel>(ServedModel{
        name, dir, std::shared_ptr<const model::Model>(std::move(*model)), {}, *tokenizer});
    const model::Model& base = *served->model;
    const attention::AttentionOptions& a = base.config().attention;
    for (const char* module : {"taylor", "taylor_norm"}) {
      for (int order : {2, 4, 6}) {
        if (module == a.module && order == a.order) continue;  // the model itself
        auto variant = base.ServeAs(module, order, a.max_state_bytes_per_layer);
        if (!variant.ok()) continue;  // not servable this way, or over the budget
        served->variants.push_back(std::make_shared<ServedModel>(ServedModel{
            name, dir, std::shared_ptr<const model::Model>(std::move(*variant)), {},
            served->tokenizer}));
      }
    }
    out.push_back(std::move(served));
  }
  if (out.empty()) return absl::InvalidArgumentError("model_dirs: no model to serve");
  return std::make_unique<ModelCatalogue>(std::move(out));
}

ModelCatalogue::ModelCatalogue(std::vector<std::shared_ptr<const ServedModel>> models)
    : models_(std::move(models)) {}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelCatalogue::Find(
    const std::string& name) const {
  if (name.empty() && !models_.empty()) return models_.front();
  std::vector<std::string> names;
  for (const auto& m : models_) {
    if (m->name == name) return m;
    names.push_back(m->name);
  }
  return absl::NotFoundError(absl::StrCat("model: no model '", Excerpt(name),
                                          "'; served: ", absl::StrJoin(names, ", ")));
}

absl::StatusOr<std::shared_ptr<const ServedModel>> ModelCatalogue::Resolve(
    const std::string& name, const std::string& module, int order) const {
  auto found = Find(name);
  if (!found.ok()) return found.status();
  const ServedModel& m = **found;
  if (module.empty() ||
      (module == m.attention() && (order == 0 || order == m.attention_order()))) {
    return found;
  }
  std::string offered = absl::StrCat(m.attention(), " order ", m.attention_order());
  for (const auto& v : m.variants) {
    if (v->attention() == module && (order == 0 || order == v->attention_order())) return v;
    absl::StrAppend(&offered, ", ", v->attention(), " order ", v->attention_order());
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "attention_module: model '", m.name, "' can be served here as: ", offered));
}

std::shared_ptr<const ServedModel> ModelCatalogue::FindByFingerprint(
    const Sha256Digest& fingerprint) const {
  for (const auto& m : models_) {
    if (m->model->Fingerprint() == fingerprint) return m;
    for (const auto& v : m->variants) {
      if (v->model->Fingerprint() == fingerprint) return v;
    }
  }
  return nullptr;
}

}  // namespace attnserve::catalogue
