#include "server/model/config.h"

#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "attnserve/v1/model_config.pb.h"

namespace attnserve::model {
namespace {

class CollectErrors : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (first_.empty()) first_ = absl::StrCat("line ", line + 1, ":", column + 1, ": ", message);
  }
  const std::string& first() const { return first_; }

 private:
  std::string first_;
};

absl::Status Invalid(const std::string& field, const std::string& rule, int64_t got) {
  return absl::InvalidArgumentError(absl::StrCat(field, " ", rule, ", got ", got));
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& c) {
  if (c.vocab_size < kMinVocabSize) {
    return Invalid("vocab_size", absl::StrCat("must be >= ", kMinVocabSize,
                                              " (256 bytes + special tokens)"),
                   c.vocab_size);
  }
  if (c.num_layers < 1) return Invalid("num_layers", "must be >= 1", c.num_layers);
  if (c.mlp_hidden < 1) return Invalid("mlp_hidden", "must be >= 1", c.mlp_hidden);
  if (c.max_context < 1) return Invalid("max_context", "must be >= 1", c.max_context);
  if (!(c.rope_theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("rope_theta must be > 0, got ", c.rope_theta));
  }
  if (!(c.norm_eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("norm_eps must be > 0, got ", c.norm_eps));
  }
  if (absl::Status s = attention::ValidateAttentionOptions(c.attention); !s.ok()) return s;
  if (c.attention.value_dim != c.attention.head_dim) {
    return absl::InvalidArgumentError("value_dim must equal head_dim");
  }
  if (c.dim != c.attention.num_heads * c.attention.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "dim must equal num_heads * head_dim: ", c.dim, " != ", c.attention.num_heads,
        " * ", c.attention.head_dim));
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ParseModelConfig(std::string_view text) {
  v1::ModelConfig proto;
  google::protobuf::TextFormat::Parser parser;
  CollectErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(text), &proto)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config is not valid ModelConfig text format: ", errors.first()));
  }
  ModelConfig c;
  const ModelConfig d;  // defaults for omitted (zero) fields
  c.name = proto.name().empty() ? d.name : proto.name();
  c.vocab_size = proto.vocab_size() ? proto.vocab_size() : d.vocab_size;
  c.dim = proto.dim();
  c.num_layers = proto.num_layers();
  c.mlp_hidden = proto.mlp_hidden();
  c.rope_theta = proto.rope_theta() != 0 ? proto.rope_theta() : d.rope_theta;
  c.norm_eps = proto.norm_eps() != 0 ? proto.norm_eps() : d.norm_eps;
  c.max_context = proto.max_context() ? proto.max_context() : d.max_context;
  const v1::AttentionConfig& a = proto.attention();
  c.attention.module = a.module();
  c.attention.order = a.order();
  c.attention.qk_norm = a.qk_norm();
  c.attention.qk_temperature = a.qk_temperature();
  c.attention.learn_temperature = a.learn_temperature();
  c.attention.chunk_size = a.chunk_size() ? a.chunk_size() : d.attention.chunk_size;
  c.attention.decay_horizon = a.decay_horizon();
  c.attention.num_heads = proto.num_heads();
  c.attention.head_dim = proto.head_dim();
  c.attention.value_dim = proto.head_dim();
  if (c.attention.module.empty()) {
    return absl::InvalidArgumentError("attention.module is missing");
  }
  if (absl::Status s = ValidateModelConfig(c); !s.ok()) return s;
  return c;
}

std::string ModelConfigToText(const ModelConfig& c) {
  v1::ModelConfig proto;
  proto.set_name(c.name);
  proto.set_vocab_size(c.vocab_size);
  proto.set_dim(c.dim);
  proto.set_num_layers(c.num_layers);
  proto.set_num_heads(c.attention.num_heads);
  proto.set_head_dim(c.attention.head_dim);
  proto.set_mlp_hidden(c.mlp_hidden);
  proto.set_rope_theta(c.rope_theta);
  proto.set_norm_eps(c.norm_eps);
  proto.set_max_context(c.max_context);
  v1::AttentionConfig* a = proto.mutable_attention();
  a->set_module(c.attention.module);
  a->set_order(c.attention.order);
  a->set_qk_norm(c.attention.qk_norm);
  a->set_qk_temperature(c.attention.qk_temperature);
  a->set_learn_temperature(c.attention.learn_temperature);
  a->set_chunk_size(c.attention.chunk_size);
  a->set_decay_horizon(c.attention.decay_horizon);
  std::string out;
  google::protobuf::TextFormat::PrintToString(proto, &out);
  return out;
}

int64_t ParameterCount(const ModelConfig& c) {
  const int64_t dim = c.dim, hidden = c.mlp_hidden, vocab = c.vocab_size;
  const int64_t per_layer = 2 * dim                 // two RMSNorm gains
                            + 4 * dim * dim         // wq, wk, wv, wo
                            + 3 * dim * hidden      // w_gate, w_up, w_down
                            + (c.attention.learn_temperature ? 1 : 0);
  return 2 * vocab * dim  // embedding + untied head
         + c.num_layers * per_layer + dim;  // + final norm
}

}  // namespace attnserve::model
