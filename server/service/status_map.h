// The one mapping from absl::Status to grpc::Status, and code names for metrics.
#pragma once

#include <grpcpp/support/status.h>

#include <string>

#include "absl/status/status.h"

namespace attnserve::service {

// Same code and message; OK stays OK.
grpc::Status ToGrpcStatus(const absl::Status& status);

// "OK", "INVALID_ARGUMENT", ... as gRPC spells them.
std::string GrpcCodeName(grpc::StatusCode code);

}  // namespace attnserve::service
