// Creates attention modules by name (the table of names is in options.cc).
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/attention/attention.h"

namespace attnserve::attention {

// Validates `options` (see ValidateAttentionOptions) and builds the module.
absl::StatusOr<std::unique_ptr<Attention>> CreateAttention(const AttentionOptions& options);

}  // namespace attnserve::attention
