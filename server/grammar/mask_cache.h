// Grammar::MaskCache: the token masks of states seen before, per vocabulary, so that a
// state that recurs (inside a string, between properties) costs a lookup. Shared by every
// turn on the grammar; thread-safe. Bounded twice: past kMaxBytes (16 MiB: ~2,600 masks
// over a 50k vocabulary, ~860 over 150k) a cache is cleared whole (a grammar's live states
// are few; a cleared cache refills in a few steps), and all caches of the process together
// hold at most kMaxTotalBytes, however many grammars are alive (the constraint cache keeps
// 16, and a grammar it evicted lives on in the turns still using it): a mask that would
// pass it is not kept.
#pragma once

#include <atomic>
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
  static constexpr size_t kMaxTotalBytes = size_t(256) << 20;

  MaskCache() = default;
  ~MaskCache();
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;

  std::shared_ptr<const TokenMask> Find(const Vocabulary* vocabulary, const StackSet& state);
  void Put(const Vocabulary* vocabulary, const StackSet& state,
           std::shared_ptr<const TokenMask> mask);
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  // What every mask cache of the process holds now.
  static size_t total_bytes() { return total_bytes_.load(); }

 private:
  static std::string Key(const Vocabulary* vocabulary, const StackSet& state);
  std::mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const TokenMask>> masks_;
  size_t bytes_ = 0;  // this cache's share of total_bytes_
  static std::atomic<size_t> total_bytes_;
  int64_t hits_ = 0, misses_ = 0;
};

}  // namespace attnserve::grammar
