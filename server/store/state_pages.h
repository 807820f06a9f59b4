// A session snapshot cut into shared pages (server/DESIGN.md §13): the K/V rows of every
// full block of P tokens become one immutable PAGE, named by a hash of its bytes and
// stored once per tenant; what is left (the header, the fixed-size states, the partial
// last page's rows) is the STUB, which names its pages. A chain of stored points of one
// conversation then shares every full page it has in common, so a turn writes only the
// pages it completed plus its stub, not the whole state again.
//
// Byte-level: the snapshot layout is read here from its bytes (proto/attnserve/v1/
// SNAPSHOT.md, versions 1 to 3), never through the snapshot codec, so the store stays
// free of models and LibTorch. Join gives back the ORIGINAL bytes exactly, so the
// snapshot's own verification (its CRC-32C over everything) still checks the whole
// state end to end.
//
// What is paged: a tensor of 3 dimensions whose middle one is the snapshot's position
// (a KV cache's "k" (Hkv, L, D) and "v" (Hkv, L, Dv)); every other tensor (recurrent,
// SSM, conv, Taylor states) stays whole in the stub. A page holds, for each paged
// tensor in snapshot order and each of its heads, P consecutive rows.
//
// Page size: with B the snapshot's bytes per token over its paged tensors, P is the
// largest power of two with P * B <= the target (2 MiB by default), clamped to
// [16, 4096] tokens. It depends only on the model's shape and dtypes, so successive
// states of a conversation cut their pages at the same positions.
//
// Keys and tenants: a page's id is "page_" + hex SHA-256 over a domain string, the
// tenant's tag (TenantTag), the model fingerprint, P, the paged tensors' dtype codes and
// the page's bytes. Join recomputes every key from the READER's tenant and the bytes it
// was given and refuses a page whose key differs: a key read from a stored stub is never
// trusted, and another tenant's pages never verify, so no page is shared across tenants
// (one tenant cannot tell, by time or by cached tokens, whether another stored a prompt).
// A stub also names its writer's tag, so that a state read by another tenant is answered
// as absent (NOT_FOUND), as everything of another tenant's is, before any page is read.
//
// Records: a stored record is [its writer's header][a snapshot][its writer's tail];
// EncodePagedRecord keeps the header and tail and puts the stub in the snapshot's place,
// behind a small envelope that says where each part is.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace attnserve::store {

// The bytes one page aims at (P * B at most this, above the clamp's floor).
inline constexpr int64_t kPageTargetBytes = int64_t{2} << 20;
// The clamp on P, in tokens.
inline constexpr int64_t kMinPageTokens = 16;
inline constexpr int64_t kMaxPageTokens = 4096;

// One page: its id ("page_" + 64 hex, RecordKind::kPage) and its bytes.
struct StatePage {
  std::string id;
  std::string bytes;
};

// A snapshot cut in two.
struct SplitState {
  std::string stub;
  // Pages in position order; an id may repeat (two blocks of identical rows).
  std::vector<StatePage> pages;
  int64_t page_tokens = 0;  // P (0: the snapshot has no paged tensor)
};

// Cuts `snapshot` (versions 1..3, whole: total_bytes equal to its size) for `tenant`.
// `target_bytes` is the page size aimed at (kPageTargetBytes; tests use less). A
// snapshot with no paged tensor, or a position under P, has no pages (its stub is the
// snapshot plus the stub's header). INVALID_ARGUMENT for bytes that are no snapshot this
// code can read.
absl::StatusOr<SplitState> SplitSnapshot(std::string_view tenant, std::string_view snapshot,
                                         int64_t target_bytes = kPageTargetBytes);

// The ids of the pages `stub` names, in order (repeats included). DATA_LOSS if `stub`
// is no stub.
absl::StatusOr<std::vector<std::string>> StubPageIds(std::string_view stub);

// True if `stub` says it was cut for `tenant` (a stub carries its writer's TenantTag: a
// hint that lets a reader answer another tenant's state as absent; the keys decide).
bool StubIsTenants(std::string_view stub, std::string_view tenant);

// The original snapshot from `stub` and its pages' bytes (`pages[i]` for the i-th id of
// StubPageIds). With `verify_tenant` set: NOT_FOUND "another tenant's" if the stub says
// it was cut for another tenant (to that reader it does not exist); then each page's key
// is recomputed from that tenant and the bytes given, and DATA_LOSS "page ... does not
// match its key" refuses a page whose key differs from the stub's. Without it the pages
// are taken as they are (only for bytes this process keyed itself). DATA_LOSS for a
// damaged stub or a page of the wrong size.
absl::StatusOr<std::string> JoinSnapshot(std::string_view stub,
                                         const std::vector<std::string_view>& pages,
                                         std::optional<std::string_view> verify_tenant);

// --- Records that carry a stub in their snapshot's place. ---
//
// Layout: "ATTNPREC", u64 prefix bytes, u64 stub bytes (0: the record carries no
// snapshot), then the prefix, the stub and the tail. Little-endian.
struct PagedRecordView {
  std::string_view prefix;
  std::string_view stub;  // empty: no snapshot
  std::string_view tail;
};
// True if `bytes` starts with the envelope's magic (it may still be damaged).
bool IsPagedRecord(std::string_view bytes);
std::string EncodePagedRecord(std::string_view prefix, std::string_view stub,
                              std::string_view tail);
// The parts of a record IsPagedRecord accepts; DATA_LOSS if its lengths run past it.
absl::StatusOr<PagedRecordView> ParsePagedRecord(std::string_view bytes);

// The total_bytes a snapshot's header declares, if `bytes` starts with a snapshot header
// of a version this code reads (1..3); nullopt otherwise.
std::optional<uint64_t> SnapshotDeclaredBytes(std::string_view bytes);

}  // namespace attnserve::store
