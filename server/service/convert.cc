#include "server/service/convert.h"

#include <google/protobuf/text_format.h>

#include "absl/strings/str_cat.h"
#include "server/attention/options.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::service {
v1::Session ToProto(const session::SessionInfo& info) {
  v1::Session s;
  s.set_id(info.id);
  s.set_model(info.model);
  s.set_attention_module(info.attention);
  s.set_attention_order(info.attention_order);
  s.set_position(info.position);
  s.set_state_bytes(info.state_bytes);
  s.set_created_unix_ms(absl::ToUnixMillis(info.created));
  s.set_last_used_unix_ms(absl::ToUnixMillis(info.last_used));
  s.set_ttl_seconds(absl::ToInt64Seconds(info.ttl));
  s.set_busy(info.busy);
  return s;
}

v1::ModelInfo ToProto(const catalogue::ServedModel& m) {
  v1::ModelInfo info;
  info.set_name(m.name);
  google::protobuf::TextFormat::ParseFromString(model::ModelConfigToText(m.model->config()),
                                                info.mutable_config());
  info.set_attention_module(m.attention());
  info.set_parameter_count(m.model->ParameterCount());
  info.set_state_bytes_per_session_at_1k(m.model->StateBytes(1024));
  info.set_state_bytes_per_session_at_16k(m.model->StateBytes(16384));
  info.set_break_even_context(m.model->BreakEvenContext());
  info.set_directory(m.directory);
  info.set_num_kv_heads(m.model->config().attention.num_kv_heads);
  info.set_weight_bytes(m.model->WeightBytes());
  info.set_weight_types(m.model->WeightTypes());
  const model::ModelConfig& c = m.model->config();
  if (c.HasAttention() && !attention::HasFixedState(c.attention)) {
    info.set_kv_cache_type(attention::KvCacheTypeName(c.attention.kv_cache_type));
  }
  const auto at_32k = m.model->StateBytesByMixer(32768);
  for (const model::Model::MixerBytes& k : m.model->StateBytesByMixer(1024)) {
    v1::MixerStateBytes* out = info.add_state_bytes_by_mixer();
    out->set_mixer(k.mixer);
    out->set_layers(k.layers);
    out->set_bytes_at_1k(k.bytes);
    for (const auto& big : at_32k) {
      if (big.mixer == k.mixer) out->set_bytes_at_32k(big.bytes);
    }
  }
  const tokenizer::Tokenizer& t = *m.tokenizer;
  v1::TokenizerInfo* ti = info.mutable_tokenizer();
  ti->set_kind(t.kind());
  ti->set_vocab_size(t.vocab_size());
  ti->set_bos_id(t.bos_id());
  ti->set_add_bos(t.add_bos());
  for (int32_t eos : t.eos_ids()) ti->add_eos_ids(eos);
  return info;
}

absl::StatusOr<v1::TokenizeResponse> TokenizeText(const catalogue::ServedModel& model,
                                                  int64_t position, const std::string& text) {
  const tokenizer::Tokenizer& t = *model.tokenizer;
  auto ids = t.Encode(text, /*continuation=*/position > 0);
  if (!ids.ok()) return ids.status();
  v1::TokenizeResponse response;
  response.set_model(model.name);
  tokenizer::StreamDecoder decoder(t, /*text_started=*/position > 0);
  for (int32_t id : *ids) {
    auto* token = response.add_tokens();
    token->set_id(id);
    token->set_text(decoder.Next(id));
  }
  return response;
}

v1::FinishReason ToProto(scheduler::FinishReason reason) {
  switch (reason) {
    case scheduler::FinishReason::kStop: return v1::FINISH_REASON_STOP;
    case scheduler::FinishReason::kLength: return v1::FINISH_REASON_LENGTH;
    case scheduler::FinishReason::kCancelled: return v1::FINISH_REASON_CANCELLED;
    case scheduler::FinishReason::kError: return v1::FINISH_REASON_ERROR;
    case scheduler::FinishReason::kShutdown: return v1::FINISH_REASON_SHUTDOWN;
  }
  return v1::FINISH_REASON_UNSPECIFIED;
}

}  // namespace attnserve::service
