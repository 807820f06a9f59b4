// Shared by session_store.cc and session_store_durable.cc only.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/common/excerpt.h"
#include "server/catalogue/served_model.h"

namespace attnserve::session::internal {

inline absl::Status NotFound(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("session_id: no session '", Excerpt(id), "' (never created, closed, or expired)"));
}

inline absl::Status Draining() {
  return absl::UnavailableError(
      "the server is shutting down; sessions are being saved, retry on another server");
}

// Bytes a session of `model` at `position` is charged: what its state holds there (a
// fixed state the same at any position; a KV cache, a hybrid's attention layers among
// them, as it has grown).
inline int64_t ChargeFor(const catalogue::ServedModel& model, int64_t position) {
  return model.model->StateBytes(position);
}

}  // namespace attnserve::session::internal
