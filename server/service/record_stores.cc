#include "server/service/record_stores.h"

#include <utility>

#include "server/store/record_kind.h"

namespace attnserve::service {
namespace {

using store::RecordKind;

// A connection of its own to the --session_store, seeing only `kinds`; null for the
// memory store. Each checkpoint store's view holds state pages too (RecordKind::kPage):
// its records keep their snapshots by pages there (checkpoint_store.h). Pages are keyed
// by tenant, so the two stores' views over one Redis or directory may share a page only
// within one tenant (a stored response and a kept chat state of the same conversation).
absl::StatusOr<std::unique_ptr<store::SnapshotStore>> Durable(
    const config::ServerOptions& options, std::initializer_list<RecordKind> kinds) {
  if (options.session_store == "memory") return std::unique_ptr<store::SnapshotStore>();
  auto durable = store::OpenSnapshotStore(options.session_store);
  if (!durable.ok()) return durable.status();
  return store::ForKinds(kinds, *std::move(durable));
}

}  // namespace

absl::StatusOr<RecordStores> OpenRecordStores(const config::ServerOptions& options) {
  RecordStores out;
  store::CheckpointStore::Options responses;
  responses.kind = RecordKind::kResponse;
  responses.memory_bytes = options.checkpoint_memory_bytes;
  responses.tenant_max_records = options.tenant_max_responses;
  responses.tenant_max_bytes = options.tenant_response_bytes;
  responses.memory_flag = "--checkpoint_memory_bytes";
  responses.page_target_bytes = options.state_page_bytes;
  responses.records_flag = "--tenant_max_responses";
  responses.bytes_flag = "--tenant_response_bytes";
  responses.remedy =
      "delete stored responses (DELETE /v1/responses/{id}) or conversations, or wait for "
      "them to expire";
  auto durable = Durable(options, {RecordKind::kResponse, RecordKind::kPage});
  if (!durable.ok()) return durable.status();
  responses.durable = *std::move(durable);
  out.responses = std::make_unique<store::CheckpointStore>(std::move(responses));

  store::CheckpointStore::Options states;
  states.kind = RecordKind::kPrefixState;
  states.disposable = true;
  states.memory_bytes = options.prefix_cache_bytes;
  states.tenant_max_bytes = options.tenant_prefix_bytes;
  states.memory_flag = "--prefix_cache_bytes";
  states.page_target_bytes = options.state_page_bytes;
  states.bytes_flag = "--tenant_prefix_bytes";
  durable = Durable(options, {RecordKind::kPrefixState, RecordKind::kPage});
  if (!durable.ok()) return durable.status();
  states.durable = *std::move(durable);
  out.prefix_states = std::make_unique<store::CheckpointStore>(std::move(states));
  return out;
}

}  // namespace attnserve::service
