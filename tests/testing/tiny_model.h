// A tiny served model built in memory for tests (2 layers, dim 32, 2 heads of 16).
// Weights are scaled up so that greedy decoding moves between bytes instead of
// repeating one, which makes token-for-token comparisons meaningful.
#pragma once

#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "server/catalogue/served_model.h"

namespace attnserve::test_util {

inline std::shared_ptr<const catalogue::ServedModel> TinyServedModel(
    const std::string& module, int64_t max_context = int64_t{1} << 20) {
  model::ModelConfig c;
  c.name = "tiny-" + module;
  c.dim = 32;
  c.num_layers = 2;
  c.mlp_hidden = 64;
  c.max_context = max_context;
  c.attention.module = module;
  c.attention.num_heads = 2;
  c.attention.num_kv_heads = 2;
  c.attention.head_dim = 16;
  c.attention.value_dim = 16;
  c.attention.chunk_size = 8;
  auto m = model::Model::Create(c, 3);
  EXPECT_TRUE(m.ok()) << m.status();
  for (auto& [name, t] : (*m)->NamedParameters()) {
    if (name.find("norm") == std::string::npos) t.mul_(20);
  }
  return std::make_shared<catalogue::ServedModel>(
      catalogue::ServedModel{c.name, "", std::move(m).value(), {}});
}

}  // namespace attnserve::test_util
