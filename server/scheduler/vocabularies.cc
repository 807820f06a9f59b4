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
  // the same address; an entry whose tokenizer is gone is dropped at the next build.
  static auto* vocabularies =
      new std::map<const tokenizer::Tokenizer*,
                   std::pair<std::weak_ptr<const tokenizer::Tokenizer>,
                             std::shared_ptr<const grammar::Vocabulary>>>();
  std::lock_guard<std::mutex> lock(mu);
  auto& [owner, vocabulary] = (*vocabularies)[tokenizer.get()];
  if (vocabulary != nullptr && owner.lock() == tokenizer) return vocabulary;
  for (auto it = vocabularies->begin(); it != vocabularies->end();) {
    it = it->second.first.expired() && it->first != tokenizer.get() ? vocabularies->erase(it)
                                                                    : std::next(it);
  }
  std::vector<std::string> bytes(size_t(tokenizer->vocab_size()));
  for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
    bytes[size_t(id)] = tokenizer->TokenBytes(id);
  }
  vocabulary = std::make_shared<const grammar::Vocabulary>(bytes, tokenizer->eos_ids());
  owner = tokenizer;
  return vocabulary;
}

}  // namespace attnserve::scheduler
