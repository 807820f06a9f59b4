#include "server/grammar/vocabulary.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "server/grammar/mask_cache.h"

namespace attnserve::grammar {

Vocabulary::Vocabulary(const std::vector<std::string>& token_bytes,
                       std::vector<int32_t> eos_ids)
    : size_(int(token_bytes.size())),
      eos_ids_(std::move(eos_ids)),
      token_bytes_(token_bytes),
      ids_with_byte_(256) {
  for (int32_t id = 0; id < size_; ++id) {
    for (char c : token_bytes_[size_t(id)]) {
      auto& ids = ids_with_byte_[uint8_t(c)];
      if (ids.empty() || ids.back() != id) ids.push_back(id);
    }
  }
  struct BuildNode {
    std::vector<std::pair<uint8_t, int32_t>> kids;
    std::vector<int32_t> tokens;
  };
  std::vector<BuildNode> build(1);
  for (int32_t id = 0; id < int32_t(token_bytes.size()); ++id) {
    const std::string& bytes = token_bytes[size_t(id)];
    if (bytes.empty()) continue;  // special: never allowed by a grammar
    if (std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end()) continue;
    int32_t node = 0;
    for (char c : bytes) {
      const uint8_t b = uint8_t(c);
      int32_t next = -1;
      for (const auto& [kb, kn] : build[size_t(node)].kids) {
        if (kb == b) {
          next = kn;
          break;
        }
      }
      if (next < 0) {
        next = int32_t(build.size());
        build[size_t(node)].kids.emplace_back(b, next);
        build.emplace_back();
      }
      node = next;
    }
    build[size_t(node)].tokens.push_back(id);
  }
  nodes_.resize(build.size());
  for (size_t n = 0; n < build.size(); ++n) {
    auto& kids = build[n].kids;
    std::sort(kids.begin(), kids.end());
    nodes_[n].first_child = int32_t(children_.size());
    nodes_[n].child_count = int32_t(kids.size());
    children_.insert(children_.end(), kids.begin(), kids.end());
    nodes_[n].first_token = int32_t(node_tokens_.size());
    nodes_[n].token_count = int32_t(build[n].tokens.size());
    node_tokens_.insert(node_tokens_.end(), build[n].tokens.begin(), build[n].tokens.end());
  }
}

struct Vocabulary::WalkStates {
  static constexpr int32_t kRefused = -1, kExhausted = -2;

  // The state after `state` consumes `b`: its id, kRefused, or kExhausted when `work`
  // ran out computing it.
  int32_t Next(const Grammar& grammar, int32_t state, uint8_t b, Work& work) {
    const uint64_t key = uint64_t(uint32_t(state)) << 8 | b;
    if (auto it = next.find(key); it != next.end()) return it->second;
    StackSet to;
    if (!Matcher::Advance(grammar, states[size_t(state)], b, to, &work)) {
      if (work.exhausted()) return kExhausted;
      next.emplace(key, kRefused);
      return kRefused;
    }
    const int32_t id = Intern(std::move(to));
    next.emplace(key, id);
    return id;
  }

  int32_t Intern(StackSet state) {
    std::string key(reinterpret_cast<const char*>(state.data.data()),
                    state.data.size() * sizeof(int32_t));
    auto [it, added] = ids.try_emplace(std::move(key), int32_t(states.size()));
    if (added) states.push_back(std::move(state));
    return it->second;
  }

  std::vector<StackSet> states;
  std::unordered_map<std::string, int32_t> ids;  // a state's data -> its index
  std::unordered_map<uint64_t, int32_t> next;    // (state, byte) -> state or kRefused
};

bool Vocabulary::Walk(const Grammar& grammar, int32_t node, int32_t state, TokenMask& mask,
                      WalkStates& states, Work& work) const {
  const Node& n = nodes_[size_t(node)];
  for (int32_t k = 0; k < n.child_count; ++k) {
    const auto& [b, child] = children_[size_t(n.first_child + k)];
    if (!work.Spend(1)) return false;  // the node itself
    const int32_t next = states.Next(grammar, state, b, work);
    if (next == WalkStates::kExhausted) return false;
    // A refused byte prunes the child's whole subtree: no token under it is allowed.
    if (next == WalkStates::kRefused) continue;
    const Node& c = nodes_[size_t(child)];
    for (int32_t t = 0; t < c.token_count; ++t) {
      const int32_t id = node_tokens_[size_t(c.first_token + t)];
      mask[size_t(id) >> 6] |= uint64_t(1) << (id & 63);
    }
    if (c.child_count > 0 && !Walk(grammar, child, next, mask, states, work)) return false;
  }
  return true;
}

absl::StatusOr<TokenMask> Vocabulary::ComputeMask(const Matcher& matcher, Work& work) const {
  if (!matcher.start_status().ok()) return matcher.start_status();
  TokenMask mask((size_t(size_) + 63) / 64, 0);
  WalkStates states;
  const int32_t start = states.Intern(matcher.state());
  if (!Walk(matcher.grammar(), 0, start, mask, states, work)) return work.Exhausted("a token mask");
  if (matcher.CanEnd()) {
    for (int32_t eos : eos_ids_) {
      if (eos >= 0 && eos < size_) mask[size_t(eos) >> 6] |= uint64_t(1) << (eos & 63);
    }
  }
  return mask;
}

absl::StatusOr<std::shared_ptr<const TokenMask>> Vocabulary::Mask(const Matcher& matcher,
                                                                  Work& work) const {
  Grammar::MaskCache& cache = matcher.grammar().mask_cache();
  if (auto hit = cache.Find(this, matcher.state())) return hit;
  absl::StatusOr<TokenMask> computed = ComputeMask(matcher, work);
  if (!computed.ok()) return computed.status();
  auto mask = std::make_shared<const TokenMask>(*std::move(computed));
  cache.Put(this, matcher.state(), mask);
  return mask;
}

std::string Grammar::MaskCache::Key(const Vocabulary* vocabulary, const StackSet& state) {
  std::string key(sizeof(vocabulary) + state.data.size() * sizeof(int32_t), '\0');
  std::memcpy(key.data(), &vocabulary, sizeof(vocabulary));
  if (!state.data.empty()) {
    std::memcpy(key.data() + sizeof(vocabulary), state.data.data(),
                state.data.size() * sizeof(int32_t));
  }
  return key;
}

std::shared_ptr<const TokenMask> Grammar::MaskCache::Find(const Vocabulary* vocabulary,
                                                          const StackSet& state) {
  const std::string key = Key(vocabulary, state);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = masks_.find(key);
  if (it == masks_.end()) {
    ++misses_;
    return nullptr;
  }
  ++hits_;
  return it->second;
}

std::atomic<size_t> Grammar::MaskCache::total_bytes_{0};

Grammar::MaskCache::~MaskCache() { total_bytes_ -= bytes_; }

void Grammar::MaskCache::Put(const Vocabulary* vocabulary, const StackSet& state,
                             std::shared_ptr<const TokenMask> mask) {
  std::string key = Key(vocabulary, state);
  const size_t bytes = key.size() + mask->size() * sizeof(uint64_t) + 64;
  std::lock_guard<std::mutex> lock(mu_);
  if (bytes_ + bytes > kMaxBytes || total_bytes_.load() + bytes > kMaxTotalBytes) {
    masks_.clear();
    total_bytes_ -= bytes_;
    bytes_ = 0;
  }
  // Other grammars' caches may hold the rest: then this mask is not kept.
  if (total_bytes_.load() + bytes > kMaxTotalBytes) return;
  if (masks_.emplace(std::move(key), std::move(mask)).second) {
    bytes_ += bytes;
    total_bytes_ += bytes;
  }
}

}  // namespace attnserve::grammar
