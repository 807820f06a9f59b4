// Each tokenizer's vocabulary as constrained decoding sees it (grammar::Vocabulary: every
// id's bytes and their trie), built once per tokenizer and shared by every thread.
// Admission builds it, and computes a constrained turn's first mask with it, on the
// admitting thread, so that the engine thread finds both ready (building the trie of a
// 151k vocabulary takes a few hundred milliseconds, far past a step's budget).
#pragma once

#include <memory>

#include "server/grammar/vocabulary.h"
#include "server/tokenizer/tokenizer.h"

namespace attnserve::scheduler {

// The vocabulary of `tokenizer`, built at the first call for it, outside the lock (a
// look-up never waits behind a build; two threads building the same one keep the
// first). Thread-safe. The vocabulary lives as
// long as the tokenizer or a caller holding it; a tokenizer freed and another made at its
// address get a new one.
std::shared_ptr<const grammar::Vocabulary> SharedVocabulary(
    const std::shared_ptr<const tokenizer::Tokenizer>& tokenizer);

}  // namespace attnserve::scheduler
