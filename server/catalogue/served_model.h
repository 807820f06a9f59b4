// A model the server hosts: loaded once at start-up, read-only afterwards, shared by
// every session on it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "server/model/model.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::catalogue {

struct ServedModel {
  // The name clients use (the config's name).
  std::string name;
  // Where it was loaded from; empty for models built in memory (tests).
  std::string directory;
  std::shared_ptr<const model::Model> model;
  // The same weights served with other attention modules (e.g. a qk_norm softmax
  // checkpoint as taylor of several orders), for sessions that ask for them.
  std::vector<std::shared_ptr<const ServedModel>> variants;
  // The model's tokenizer (never null; tokenizer::LoadTokenizer); variants share it.
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;

  const std::string& attention() const { return model->config().attention.module; }
  int attention_order() const { return model->config().attention.order; }
};

}  // namespace attnserve::catalogue
