// Parse at the edge: API protos in, validated native types out (and back). Protobuf
// types stop in this folder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/scheduler/turn.h"
#include "server/session/session_store.h"

namespace attnserve::service {

// The models a server hosts; the first is the default.
class ModelSet {
 public:
  explicit ModelSet(std::vector<std::shared_ptr<const session::ServedModel>> models);
  // Empty name -> the default model. NOT_FOUND names the served models.
  absl::StatusOr<std::shared_ptr<const session::ServedModel>> Find(
      const std::string& name) const;
  const std::vector<std::shared_ptr<const session::ServedModel>>& all() const {
    return models_;
  }

 private:
  std::vector<std::shared_ptr<const session::ServedModel>> models_;
};

// Server-side limits on a request.
struct RequestLimits {
  int max_prompt_tokens = 8192;
  int max_generated_tokens = 2048;
  int default_max_tokens = 256;
};

// A Generate request, validated: everything but the session lookup.
struct ParsedGenerate {
  std::shared_ptr<const session::ServedModel> model;  // null when a session is named
  std::string model_name;                             // as requested (may be empty)
  std::string session_id;
  scheduler::TurnRequest turn;
};

// INVALID_ARGUMENT naming the field for: an empty prompt without a session, token ids
// outside the model's vocabulary, a prompt over the limit, a negative temperature,
// top_p outside (0, 1], negative top_k, max_tokens negative or over the limit, an
// unknown stop encoding or undecodable stop string. NOT_FOUND for an unknown model.
absl::StatusOr<ParsedGenerate> ParseGenerate(const v1::GenerateRequest& request,
                                             const ModelSet& models,
                                             const RequestLimits& limits);

// Token ids must fit the vocabulary of the model that will run them.
absl::Status CheckPromptFits(const scheduler::TurnRequest& turn,
                             const session::ServedModel& model);

v1::Session ToProto(const session::SessionInfo& info);
v1::ModelInfo ToProto(const session::ServedModel& model);
v1::FinishReason ToProto(scheduler::FinishReason reason);

}  // namespace attnserve::service
