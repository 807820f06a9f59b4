// Parse at the edge: API protos in, validated native types out (and back). Protobuf
// types stop in this folder.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/scheduler/turn.h"
#include "server/catalogue/model_catalogue.h"
#include "server/session/session_store.h"

namespace attnserve::service {

v1::Session ToProto(const session::SessionInfo& info);
v1::ModelInfo ToProto(const catalogue::ServedModel& model);
v1::FinishReason ToProto(scheduler::FinishReason reason);

// `text` tokenized as a turn on `model` whose session is at `position` would be (the
// start of the session's text at 0, its continuation after), with each token's bytes.
absl::StatusOr<v1::TokenizeResponse> TokenizeText(const catalogue::ServedModel& model,
                                                  int64_t position, const std::string& text);

}  // namespace attnserve::service
