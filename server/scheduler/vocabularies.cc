#include "server/scheduler/vocabularies.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace attnserve::scheduler {

std::shared_ptr<const grammar::Vocabulary> SharedVocabulary(
    const std::shared_ptr<const tokenizer::Tokenizer>& tokenizer) {
  static std::mutex mu;
  // Guarded by mu. The weak pointer tells a tokenizer that was freed from a new one at
  // the same address; an entry whose tokenizer is gone is dropped at the next insert.
  static auto* vocabularies =
      new std::map<const tokenizer::Tokenizer*,
                   std::pair<std::weak_ptr<const tokenizer::Tokenizer>,
                             std::shared_ptr<const grammar::Vocabulary>>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = vocabularies->find(tokenizer.get());
    if (it != vocabularies->end() && it->second.first.lock() == tokenizer) return it->second.second;
  }
  // Built without the lock, so that the engine thread's look-up of a vocabulary it has
  // never waits behind a build for another model; two threads may both build a new one
  // (the first kept).
  std::vector<std::string> bytes(size_t(tokenizer->vocab_size()));
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    bytes[size_t(id)] = tokenizer->TokenBytes(id);
  }
  auto built = std::make_shared<const grammar::Vocabulary>(bytes, tokenizer->eos_ids());
  std::lock_guard<std::mutex> lock(mu);
  for (auto it = vocabularies->begin(); it != vocabularies->end();) {
    it = it->second.first.expired() ? vocabularies->erase(it) : std::next(it);
  }
  auto& [owner, vocabulary] = (*vocabularies)[tokenizer.get()];
  if (vocabulary == nullptr || owner.lock() != tokenizer) {
    owner = tokenizer;
    vocabulary = std::move(built);
  }
  return vocabulary;
}

}  // namespace attnserve::scheduler
