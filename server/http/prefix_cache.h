// Chat states kept at turn boundaries for clients that resend the whole history every
// call (most chat clients do): a request whose token ids extend a kept state's ids
// prefills only the rest, on any replica sharing the store.
//
// After a chat turn that ran on no session of the client's, the state after the prompt
// and the generated tokens is kept (CheckpointStore: this process's memory and the
// durable store), keyed by SHA-256 of (tenant, model fingerprint, chat template, token
// ids): the fingerprint (Model::Fingerprint: config, attention and weights), not the
// model's name, so a replica serving other weights under the same name (a rolling
// upgrade, --weights_bf16) simply misses. A later
// request looks up the prefixes of its own ids that end where one of its history's last
// few assistant messages ends (the candidates the front computes), longest first. A hit is used only if the
// record's tenant, fingerprint, template and every id equal the request's: an exact prefix,
// never a guess. The next turn then imports the state and prefills ids[hit:].
//
// Not kept: the state after the prompt alone (a regenerate of the same history misses),
// a turn that ended on a stop string (the text the client resends lacks tokens the
// state holds, so it could never match), and completions (no message boundaries).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "server/snapshot/snapshot_bytes.h"
#include "server/store/checkpoint_store.h"

namespace attnserve::http {

struct PrefixKey {
  std::string tenant;
  // Hex of the served model's (or variant's) Model::Fingerprint().
  std::string fingerprint;
  std::string chat_template;  // ChatTemplateName
};

class PrefixCache {
 public:
  // `checkpoints` (a store of RecordKind::kPrefixState, disposable) is not owned and
  // must outlive the cache; kept states live `ttl`.
  PrefixCache(store::CheckpointStore* checkpoints, absl::Duration ttl)
      : checkpoints_(checkpoints), ttl_(ttl) {}

  struct Hit {
    size_t tokens = 0;  // ids[0:tokens] are in `state`
    // A session snapshot: the stored record's tail, shared with the store, not copied.
    snapshot::SnapshotBytes state;
  };
  // The longest of `lengths` (each at most ids.size()) whose prefix of `ids` was kept
  // under `key`; nullopt if none. A store that cannot be read is a miss (the turn then
  // prefills everything).
  std::optional<Hit> Lookup(const PrefixKey& key, absl::Span<const int32_t> ids,
                            std::vector<size_t> lengths) const;
  // Keeps `state`, a session after exactly `ids`.
  absl::Status Save(const PrefixKey& key, absl::Span<const int32_t> ids,
                    std::shared_ptr<const std::string> state) const;

  // "pfx_" + 64 hex digits.
  static std::string KeyOf(const PrefixKey& key, absl::Span<const int32_t> ids);
  // The record: "attnserve-prefix/2\n", a JSON header's length (8 bytes little-endian),
  // the header {tenant, fingerprint, chat_template, tokens}, the ids (4 bytes each,
  // little-endian), then the state.
  static std::string Encode(const PrefixKey& key, absl::Span<const int32_t> ids,
                            const std::string& state);
  // The state of a record whose key and ids are exactly these (a view into `record`: the
  // bytes after the ids); nullopt otherwise.
  static std::optional<std::string_view> Match(const std::string& record, const PrefixKey& key,
                                               absl::Span<const int32_t> ids);

 private:
  store::CheckpointStore* const checkpoints_;
  const absl::Duration ttl_;
};

}  // namespace attnserve::http
