// A model's vocabulary as the grammar sees it: each token id's bytes in the middle of a
// text (tokenizer::Tokenizer::TokenBytes), held as a trie so that a token mask walks
// every shared prefix once (server/DESIGN.md §12). Ids that add no bytes (special and
// control tokens) are never allowed by a grammar; end-of-sequence ids are allowed where
// the grammar may end.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/grammar/matcher.h"

namespace attnserve::grammar {

// One bit per token id.
using TokenMask = std::vector<uint64_t>;
inline bool MaskAllows(const TokenMask& mask, int32_t id) {
  return (mask[size_t(id) >> 6] >> (id & 63)) & 1;
}

class Vocabulary {
 public:
  // `token_bytes[id]`: what id adds mid-text (empty: special). `eos_ids`: the ids that
  // end generation.
  Vocabulary(const std::vector<std::string>& token_bytes, std::vector<int32_t> eos_ids);

  int size() const { return size_; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  // What `id` adds mid-text (empty: special).
  const std::string& bytes(int32_t id) const { return token_bytes_[size_t(id)]; }
  // The ids whose bytes hold byte `b` somewhere (a lazy constraint's trigger can only be
  // completed by a token holding its last byte).
  const std::vector<int32_t>& IdsWithByte(uint8_t b) const { return ids_with_byte_[b]; }

  // The ids the matcher's grammar allows next: every id whose bytes it accepts whole
  // (the state after them may be anything, the end included), and the end-of-sequence
  // ids when matcher.CanEnd(). Cached per state in the grammar's MaskCache (keyed by this
  // vocabulary too), so a state seen before costs a lookup. The walk spends `work`
  // (matcher.h): RESOURCE_EXHAUSTED when it runs out, and nothing is cached then.
  absl::StatusOr<std::shared_ptr<const TokenMask>> Mask(const Matcher& matcher,
                                                        Work& work) const;
  // The same, computed without the cache (the reference the cache is tested against,
  // and the cold cost the benchmark prints).
  absl::StatusOr<TokenMask> ComputeMask(const Matcher& matcher, Work& work) const;
  // With a budget of its own (GrammarBudget::kStepWork).
  absl::StatusOr<TokenMask> ComputeMask(const Matcher& matcher) const {
    Work work;
    return ComputeMask(matcher, work);
  }

  // The trie: node 0 is the root; a node's children are sorted by byte.
  struct Node {
    int32_t first_child = -1;  // into children_
    int32_t child_count = 0;
    int32_t first_token = -1;  // into node_tokens_: the ids whose bytes end here
    int32_t token_count = 0;
  };

 private:
  // The states one mask's walk meets, each once, and their transitions by byte,
  // computed once each: inside a JSON string nearly every trie node leads back to one of
  // a few states, so a walk of the whole trie costs a lookup per node, not a byte's
  // expansion.
  struct WalkStates;
  // False when `work` ran out.
  bool Walk(const Grammar& grammar, int32_t node, int32_t state, TokenMask& mask,
            WalkStates& states, Work& work) const;

  int size_ = 0;
  std::vector<int32_t> eos_ids_;
  std::vector<std::string> token_bytes_;
  std::vector<std::vector<int32_t>> ids_with_byte_;  // 256
  std::vector<Node> nodes_;
  std::vector<std::pair<uint8_t, int32_t>> children_;  // (byte, node)
  std::vector<int32_t> node_tokens_;
};

}  // namespace attnserve::grammar
