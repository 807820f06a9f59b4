// A model the server hosts: loaded once at start-up, read-only afterwards, shared by
// every session on it.
#pragma once

#include <memory>
#include <string>

#include "server/model/model.h"

namespace attnserve::session {

struct ServedModel {
  // The name clients use (the config's name).
  std::string name;
  // Where it was loaded from; empty for models built in memory (tests).
  std::string directory;
  std::shared_ptr<const model::Model> model;

  const std::string& attention() const { return model->config().attention.module; }
  int attention_order() const { return model->config().attention.order; }
};

}  // namespace attnserve::session
