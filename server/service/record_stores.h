// The HTTP front's checkpoint stores, opened from the server's options: stored
// responses (durable to the user: refused past a budget or quota, never evicted) and
// kept chat states (disposable: evicted fairly), each in a budget of its own. Each sees
// only its own kind of record (server/store/record_kind.h), through a connection of its
// own to the --session_store when there is one.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/config/server_options.h"
#include "server/store/checkpoint_store.h"
#include "server/store/snapshot_store.h"

namespace attnserve::service {

struct RecordStores {
  std::unique_ptr<store::CheckpointStore> responses;
  std::unique_ptr<store::CheckpointStore> prefix_states;
};

// UNAVAILABLE or INVALID_ARGUMENT as OpenSnapshotStore for a bad --session_store.
absl::StatusOr<RecordStores> OpenRecordStores(const config::ServerOptions& options);

}  // namespace attnserve::service
