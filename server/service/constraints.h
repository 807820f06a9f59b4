// A request's SamplingParams.constraint compiled to the grammar its turn runs under
// (server/grammar, server/DESIGN.md §12), and the cache of compiled constraints that every
// request shares: a schema sent again (each call of an agent loop sends the same one) is
// compiled once, not on every request.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "attnserve/v1/attnserve.pb.h"
#include "server/grammar/constraint.h"

namespace attnserve::service {

// Compiles `constraint` (its kind set) without a cache. INVALID_ARGUMENT naming the field:
// "sampling.constraint.json_schema: not JSON ..." for schema text that does not parse;
// "sampling.constraint.json_schema: <the compiler's message>" for a schema outside the
// supported subset or over a limit (the message names the keyword and its path); the same
// under "sampling.constraint.tool_calls..." for a tool list (a function's parameters,
// an unknown format or choice, a named function not declared); and under the kind's field
// for a grammar whose dry run (grammar::DryRun) finds its parse stacks growing past their
// budget ("... needs more than N steps or M parse stacks for one byte after the text ...").
// Every refusal carries kConstraintErrorPayload, whose value is the constraint's kind
// ("json_schema", "json_object", "tool_calls"), so that an edge can name its own field
// (HTTP: response_format, text.format, tools) without parsing messages.
absl::StatusOr<grammar::Constraint> CompileConstraint(const v1::Constraint& constraint);

inline constexpr char kConstraintErrorPayload[] = "attnserve/constraint-error";
// The kind's name as kConstraintErrorPayload carries it ("" when none is set).
const char* ConstraintKindName(const v1::Constraint& constraint);

// Compiled constraints by their message's serialized bytes, the least recently used
// dropped past `capacity`. Refusals are kept too (compiling is deterministic), so a
// refused schema sent again costs a lookup. Thread-safe: a miss compiles on the calling
// thread without holding the lock (two concurrent misses of one key may both compile;
// the first to finish is kept).
class ConstraintCache {
 public:
  explicit ConstraintCache(size_t capacity) : capacity_(capacity) {}

  // The compiled `constraint` (CompileConstraint's answer).
  absl::StatusOr<grammar::Constraint> Get(const v1::Constraint& constraint);

  struct Stats {
    int64_t hits = 0;
    int64_t misses = 0;           // compilations
    int64_t compile_micros = 0;   // spent compiling, over every miss
    size_t entries = 0;
  };
  Stats stats() const;

 private:
  using Entry = std::pair<std::string, absl::StatusOr<grammar::Constraint>>;
  const size_t capacity_;
  mutable std::mutex mu_;
  // Guarded by mu_: most recently used first, and an index into it by key.
  std::list<Entry> order_;
  std::unordered_map<std::string, std::list<Entry>::iterator> index_;
  Stats stats_;
};

// The process's cache (16 constraints, each grammar with its token masks), shared by the
// gRPC and HTTP edges through admission.
ConstraintCache& SharedConstraintCache();

}  // namespace attnserve::service
