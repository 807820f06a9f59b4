// Every tunable's default, written once: ServerOptions (the flags) and the options
// structs of the libraries that take the value (SessionStore, LeaseKeeper, Scheduler,
// RequestLimits) read it from here, so a flag's default and a library's cannot drift.
// Each is documented where it is a flag (server_options.h).
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace attnserve::config::defaults {

// Sessions and memory.
inline constexpr int64_t kMemoryBudgetBytes = int64_t{2} << 30;
inline constexpr int kMaxSessions = 256;
inline constexpr absl::Duration kDefaultTtl = absl::Minutes(30);
inline constexpr absl::Duration kMaxTtl = absl::Hours(24);
// Store leases.
inline constexpr absl::Duration kLeaseTtl = absl::Seconds(5);
inline constexpr absl::Duration kLeaseWait = absl::Seconds(2);
// Requests.
inline constexpr int kMaxPromptTokens = 8192;
inline constexpr int kMaxStopStrings = 16;
inline constexpr int kMaxStopBytes = 256;
inline constexpr int kMaxGeneratedTokens = 2048;
inline constexpr int kDefaultMaxTokens = 256;
// The engine.
inline constexpr int kThreads = 1;
inline constexpr int kPrefillChunkTokens = 256;
inline constexpr int kPrefillTokensPerStep = 256;
inline constexpr absl::Duration kStreamIdleTimeout = absl::Seconds(60);
// The HTTP front (server/http).
inline constexpr char kHttpListen[] = "127.0.0.1:8000";
inline constexpr int kHttpMaxStreams = 64;
// Threads beyond the stream slots: /health, /v1/models and refusals while every slot streams.
inline constexpr int kHttpSpareThreads = 8;
// Threads kept from connections: they serve connections over a cap (/health only, each
// within a short deadline), so no number of clients can starve /health.
inline constexpr int kHttpReservedThreads = 4;
// How long one HTTP request's head and body may take to arrive.
inline constexpr absl::Duration kHttpRequestTimeout = absl::Seconds(30);
// Stored responses (/v1/responses): how long one lives, and the bytes of them cached in
// memory (all of them without a durable store). Sized for real conversations: stored
// records share their state's pages, so a conversation costs about its final state. On
// Qwen3-0.6B's shape (16-bit KV, 114,688 bytes per token) a 20-turn conversation of
// ~150-word messages and 150-token answers reaches 6,633 tokens and stores 779 MB, 1.02x
// its final state (README.md, "Sizing stored state"); 4 GiB holds five of them, 37,449
// tokens, in a memory store or a durable store's cache here (both keep stubs and pages).
inline constexpr absl::Duration kResponseTtl = absl::Hours(24);
inline constexpr int64_t kCheckpointMemoryBytes = int64_t{4} << 30;
// The bytes a page of stored state aims at (server/store/state_pages.h): 2 MiB, 18
// tokens of Qwen3-0.6B's 16-bit KV rounded down to a power of two (16).
inline constexpr int64_t kStatePageBytes = int64_t{2} << 20;
// Each tenant's stored responses at most: 3 GiB, 28,086 tokens of Qwen3-0.6B's state at
// 16 bits, four such conversations (3.12 GB) and the next turn's room; a memory store
// holds one tenant at its quota.
inline constexpr int kTenantMaxResponses = 1000;
inline constexpr int64_t kTenantResponseBytes = int64_t{3} << 30;
// Kept chat states (the prefix cache): the bytes of them in memory, and the most one
// tenant keeps (its oldest go first, in memory and in a durable store). A client that
// resends a 20-turn history hits only if the state of its previous turn is still kept:
// per tenant, as for stored responses, four such conversations of Qwen3-0.6B's shape.
inline constexpr int64_t kPrefixCacheBytes = int64_t{4} << 30;
inline constexpr int64_t kTenantPrefixBytes = int64_t{3} << 30;
// Conversations (/v1/conversations): how long one lives after its last change (its
// responses' states as long).
inline constexpr absl::Duration kConversationTtl = absl::Hours(24 * 30);
// Most conversations one tenant keeps; bytes of conversation records a server without a
// durable store keeps in memory.
inline constexpr int kMaxConversationsPerTenant = 1000;
inline constexpr int64_t kConversationMemoryBytes = int64_t{256} << 20;

}  // namespace attnserve::config::defaults
