// A turn's constraint: the grammar its answer must match, applied before each sampling
// step (server/DESIGN.md §12). Owned by the scheduler's turn; the service and the HTTP
// front build the Constraint from a request (a JSON Schema, a tool-call envelope).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/grammar/matcher.h"
#include "server/grammar/vocabulary.h"

namespace attnserve::grammar {

struct Constraint {
  std::shared_ptr<const Grammar> grammar;
  // Empty: the whole answer matches `grammar` from its first byte. Else the answer is free
  // text until it holds `trigger` (a tool call's opening tag, for tool_choice "auto");
  // from there the grammar applies to the trigger and what follows it.
  std::string trigger;
};

// The admission's dry run of a grammar, before a turn using it may enter the batch (on
// the caller's thread, never the engine's): from the grammar's start, a best-first walk
// over its states that follows the states with the most parse stacks first (where an
// ambiguous grammar grows), advancing each by every byte its stacks allow, each byte
// within GrammarBudget::kByteWork and kMaxStacks. At most kDryRunStates states and
// kDryRunWork work in all: what it does not reach, the per-step budget still bounds.
// INVALID_ARGUMENT naming the limit and the bytes that reached it when a byte needs more
// (a schema the server refuses, not a server too busy).
inline constexpr int kDryRunStates = 256;
inline constexpr int64_t kDryRunWork = int64_t(1) << 26;
absl::Status DryRun(const Grammar& grammar);

// One turn's progress through its constraint. Not thread-safe: the engine thread's.
class ConstraintState {
 public:
  explicit ConstraintState(Constraint constraint);

  // Sets the logits of every id the grammar refuses next to -inf (`logits` has
  // vocabulary.size() entries at least; ids past it are refused too). `at_start_bytes`,
  // when set, gives an id's bytes where they differ from the vocabulary's mid-text bytes
  // (a SentencePiece text's first piece loses its leading space): those steps are
  // checked id by id. While a lazy constraint waits for its trigger, only the ids that
  // would complete the trigger are checked: the bytes after it in the same token must be
  // what the grammar allows (the rest of the text is free).
  // FAILED_PRECONDITION when no id of the vocabulary continues the grammar (a vocabulary
  // that cannot spell a byte the grammar needs), and when the step's grammar work passes
  // GrammarBudget::kStepWork (matcher.h): the logits are then partly masked and the turn
  // must end. Advance answers the same when its bytes pass a byte's budget.
  absl::Status ApplyMask(float* logits, int64_t vocab, const Vocabulary& vocabulary,
                         const std::function<std::string(int32_t)>* at_start_bytes = nullptr);
  // The token chosen added `bytes` to the answer. INTERNAL if the grammar refuses them (a
  // masked step never does).
  absl::Status Advance(std::string_view bytes);
  // The grammar is active and its sentence complete with nothing allowed after it: the
  // turn ends here (finish_reason "stop").
  bool MustEnd() const;
  // End-of-sequence is allowed now (the grammar is inactive, or may end).
  bool CanEnd() const;
  // Whether the grammar applies yet (false while a lazy constraint waits for its trigger).
  bool active() const { return matcher_.has_value(); }

 private:
  Constraint constraint_;
  std::optional<Matcher> matcher_;
  std::optional<Matcher> start_;  // lazy: the grammar's start, to check a trigger's token
  std::string tail_;  // lazy: the last trigger.size()-1 bytes of free text, to find it
};

}  // namespace attnserve::grammar
