// The session snapshot codec: one session's state as a self-describing, verified byte
// string (layout and refusal rules: proto/attnserve/v1/SNAPSHOT.md). What ExportSession
// streams, ImportSession reads and the durable session stores hold.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/model/model.h"
#include "server/catalogue/model_catalogue.h"
#include "server/common/tenant.h"
#include "server/snapshot/snapshot_bytes.h"

namespace attnserve::snapshot {

// The version EncodeSnapshot writes. Readers also accept version 1 (no owner; such a
// snapshot belongs to kDefaultTenant).
// Version 3 adds float16 and bfloat16 KV caches (the server's --kv_cache_type); readers
// accept versions 1 and 2 (float32 only) too.
inline constexpr uint32_t kSnapshotVersion = 3;
inline constexpr uint32_t kOldestSnapshotVersion = 1;
// Longest owner (tenant name) a snapshot may carry.
inline constexpr size_t kMaxSnapshotOwnerBytes = 255;
// Bytes of the fixed header; SnapshotTotalBytes needs this many to answer.
inline constexpr size_t kSnapshotFixedHeaderBytes = 96;

// What a snapshot records about its session besides the state's tensors.
struct SnapshotInfo {
  // Tokens in the state.
  int64_t position = 0;
  // The token sampled last and not yet in the state.
  std::optional<int32_t> pending_token;
  // The session's idle time-to-live.
  absl::Duration ttl = absl::ZeroDuration();
  // The tenant the session belongs to (at most kMaxSnapshotOwnerBytes bytes).
  std::string owner = kDefaultTenant;
};

// Encodes a session on `model` whose state is `state` (null: a session that has not run
// yet, at position 0). Reads the state's tensors: the caller holds the session's turn.
std::string EncodeSnapshot(const catalogue::ServedModel& model, const model::DecodeState* state,
                           const SnapshotInfo& info);

// A snapshot checked completely (size, checksum, model, every section and shape), not
// yet turned into tensors.
struct VerifiedSnapshot {
  SnapshotBytes bytes;
  std::shared_ptr<const catalogue::ServedModel> model;
  // info.position counts the tokens in the state only (not the pending token).
  SnapshotInfo info;
  // Bytes of tensor payload (the state's size).
  int64_t state_bytes = 0;
  // Offset in `bytes` of each tensor's values, per layer, in StateShapes order.
  std::vector<std::vector<size_t>> payload_offsets;
  // Each tensor's element type, in the same order, all layers in one list: float32, or
  // for KV caches of version 3 float16 / bfloat16.
  std::vector<at::ScalarType> payload_types;
};

// The size a snapshot declares in its first kSnapshotFixedHeaderBytes bytes, so a reader
// can refuse an absurd one before buffering it. INVALID_ARGUMENT when `prefix` is not a
// snapshot, a format version this server does not read, or declares more than
// `max_bytes`.
absl::StatusOr<uint64_t> SnapshotTotalBytes(std::string_view prefix, uint64_t max_bytes);

// The owner (tenant) a snapshot's header names, without verifying the rest:
// kDefaultTenant for version 1. INVALID_ARGUMENT or DATA_LOSS as SnapshotTotalBytes, or
// when the header's variable fields run past header_bytes.
absl::StatusOr<std::string> SnapshotOwner(std::string_view bytes);

// Verifies `bytes` against the models of `catalogue`, in the order SNAPSHOT.md lists:
// INVALID_ARGUMENT (not a snapshot, version, limit, sections), DATA_LOSS (truncated,
// trailing bytes, checksum), FAILED_PRECONDITION (no served model has its fingerprint).
// Makes no tensors: any thread may call it.
absl::StatusOr<VerifiedSnapshot> VerifySnapshot(SnapshotBytes bytes,
                                                const catalogue::ModelCatalogue& catalogue,
                                                uint64_t max_bytes);

// The state a verified snapshot holds, as tensors of its model.
absl::StatusOr<std::unique_ptr<model::DecodeState>> RestoreSnapshotState(
    const VerifiedSnapshot& snapshot);

}  // namespace attnserve::snapshot
