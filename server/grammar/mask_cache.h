// Grammar::MaskCache: the token masks of states seen before, per vocabulary, so that a
// state that recurs (inside a string, between properties) costs a lookup. Shared by every
// turn on the grammar; thread-safe. Bounded: past kMaxBytes (16 MiB: ~2,600 masks over a
// 50k vocabulary, ~860 over 150k) it is cleared whole (a grammar's live states are few;
// a cleared cache refills in a few steps).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "server/grammar/grammar.h"
#include "server/grammar/vocabulary.h"

namespace attnserve::grammar {

class Grammar::MaskCache {
 public:
  static constexpr size_t kMaxBytes = size_t(16) << 20;

  std::shared_ptr<const TokenMask> Find(const Vocabulary* vocabulary, const StackSet& state);
  void Put(const Vocabulary* vocabulary, const StackSet& state,
           std::shared_ptr<const TokenMask> mask);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }

 private:
  static std::string Key(const Vocabulary* vocabulary, const StackSet& state);
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  size_t bytes_ = 0;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace attnserve::grammar
