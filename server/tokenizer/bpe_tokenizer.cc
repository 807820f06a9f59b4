#include "server/tokenizer/bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/tokenizer/bpe_split.h"

namespace attnserve::tokenizer {
namespace {

absl::Status Refuse(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the others
// (controls, space, 0x7F-0xA0, 0xAD) for 256, 257, ... in byte order.
const std::array<char32_t, 256>& ByteToCodePoint() {
  static const std::array<char32_t, 256> table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      t[b] = printable ? char32_t(b) : next++;
    }
    return t;
  }();
  return table;
}

// The inverse: code point -> byte, -1 for code points outside the alphabet.
constexpr char32_t kAlphabetEnd = 256 + 68;
const std::array<int, kAlphabetEnd>& CodePointToByte() {
  static const std::array<int, kAlphabetEnd> table = [] {
    std::array<int, kAlphabetEnd> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) t[ByteToCodePoint()[b]] = b;
    return t;
  }();
  return table;
}

std::string Quote(absl::string_view s) { return absl::StrCat("\"", s, "\""); }

}  // namespace

std::string ByteLevelSymbol(uint8_t byte) {
  const char32_t cp = ByteToCodePoint()[byte];
  if (cp < 0x80) return std::string(1, char(cp));
  return {char(0xC0 | (cp >> 6)), char(0x80 | (cp & 0x3F))};  // all below U+0800
}

std::optional<std::string> ByteLevelBytes(std::string_view token) {
  std::string out;
  for (size_t i = 0; i < token.size();) {
    const auto c = uint8_t(token[i]);
    char32_t cp;
    if (c < 0x80) {
      cp = c;
      i += 1;
    } else if ((c & 0xE0) == 0xC0 && i + 1 < token.size() &&
               (uint8_t(token[i + 1]) & 0xC0) == 0x80) {
      cp = (char32_t(c & 0x1F) << 6) | (uint8_t(token[i + 1]) & 0x3F);
      i += 2;
    } else {
      return std::nullopt;  // 3- and 4-byte characters are outside the alphabet
    }
    if (cp >= kAlphabetEnd || CodePointToByte()[cp] < 0) return std::nullopt;
    out += char(CodePointToByte()[cp]);
  }
  return out;
}

BpeTokenizer::BpeTokenizer() = default;
BpeTokenizer::~BpeTokenizer() = default;

absl::StatusOr<std::shared_ptr<const BpeTokenizer>> BpeTokenizer::Create(
    Vocabulary vocabulary, const Options& options) {
  std::shared_ptr<BpeTokenizer> t(new BpeTokenizer());
  if (vocabulary.tokens.empty()) return Refuse("the vocabulary has no tokens");
  size_t size = vocabulary.tokens.size();
  for (const AddedToken& a : vocabulary.added) {
    if (a.content.empty()) return Refuse(absl::StrCat("added token ", a.id, " is empty"));
    if (a.id < 0) {
      return Refuse(absl::StrCat("added token ", Quote(a.content), " has id ", a.id));
    }
    size = std::max(size, size_t(a.id) + 1);
  }
  t->tokens_ = std::move(vocabulary.tokens);
  for (size_t id = 0; id < t->tokens_.size(); ++id) {
    const std::string& token = t->tokens_[id];
    if (token.empty()) continue;
    if (!t->ids_.emplace(token, int32_t(id)).second) {
      return Refuse(absl::StrCat("tokens ", t->ids_[token], " and ", id, " are both ",
                                 Quote(token)));
    }
  }
  t->tokens_.resize(size);
  t->bytes_.resize(size);
  t->special_.assign(size, false);
  for (size_t id = 0; id < size; ++id) {
    const std::string& token = t->tokens_[id];
    t->bytes_[id] = ByteLevelBytes(token).value_or(token);
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = t->ids_.find(ByteLevelSymbol(uint8_t(b)));
    if (it == t->ids_.end()) {
      return Refuse(absl::StrFormat("the vocabulary has no token for byte 0x%02X (%s), which "
                                    "byte-level BPE needs for every byte",
                                    b, Quote(ByteLevelSymbol(uint8_t(b)))));
    }
    t->byte_ids_[b] = it->second;
  }
  if (vocabulary.merges.empty()) return Refuse("there are no merges");
  for (size_t rank = 0; rank < vocabulary.merges.size(); ++rank) {
    const auto& [left, right] = vocabulary.merges[rank];
    const auto l = t->ids_.find(left), r = t->ids_.find(right);
    const auto merged = t->ids_.find(left + right);
    if (l == t->ids_.end() || r == t->ids_.end() || merged == t->ids_.end()) {
      return Refuse(absl::StrCat("merge ", rank, " (", Quote(left), " ", Quote(right), "): ",
                                 Quote(l == t->ids_.end()   ? left
                                       : r == t->ids_.end() ? right
                                                            : left + right),
                                 " is not in the vocabulary"));
    }
    t->merges_[PairKey(l->second, r->second)] = Merge{int32_t(rank), merged->second};
  }
  for (AddedToken& a : vocabulary.added) {
    t->tokens_[a.id] = a.content;
    t->bytes_[a.id] = ByteLevelBytes(a.content).value_or(a.content);
    t->special_[a.id] = a.special;
  }
  t->added_ = std::move(vocabulary.added);
  for (const AddedToken& a : t->added_) t->added_starts_[uint8_t(a.content[0])] = true;
  std::stable_sort(t->added_.begin(), t->added_.end(),
                   [](const AddedToken& a, const AddedToken& b) {
                     return a.content.size() > b.content.size();
                   });
  for (const std::string& pattern : vocabulary.split_patterns) {
    auto split = internal::SplitPattern::Create(pattern);
    if (!split.ok()) return split.status();
    t->splits_.push_back(*std::move(split));
  }
  t->ignore_merges_ = vocabulary.ignore_merges;
  const auto in_range = [&](int32_t id) { return id >= 0 && size_t(id) < size; };
  if (options.bos_id != -1 && !in_range(options.bos_id)) {
    return Refuse(absl::StrCat("the BOS id ", options.bos_id, " is outside the vocabulary's ",
                               size, " tokens"));
  }
  t->bos_ = options.bos_id;
  t->add_bos_ = options.add_bos;
  if (t->add_bos_ && t->bos_ < 0) return Refuse("BOS is to be added but there is no BOS id");
  for (int32_t id : options.eos_ids) {
    if (!in_range(id)) {
      return Refuse(
          absl::StrCat("the EOS id ", id, " is outside the vocabulary's ", size, " tokens"));
    }
  }
  if (options.eos_ids.empty()) return Refuse("there is no end-of-sequence id");
  t->eos_ = options.eos_ids;
  return std::shared_ptr<const BpeTokenizer>(std::move(t));
}

absl::StatusOr<std::vector<int32_t>> BpeTokenizer::Encode(std::string_view text,
                                                          bool continuation) const {
  std::vector<int32_t> out;
  if (!continuation && add_bos_) out.push_back(bos_);
  // Stretches of text (id -1) and added tokens, cut in two passes like tokenizers'
  // AddedVocabulary: the tokens with normalized=false first, leftmost-longest.
  struct Segment {
    std::string_view text;
    int32_t id;
  };
  std::vector<Segment> segments = {{text, -1}};
  for (const bool normalized : {false, true}) {
    std::vector<Segment> next;
    for (const Segment& s : segments) {
      if (s.id >= 0) {
        next.push_back(s);
        continue;
      }
      size_t done = 0;
      for (size_t i = 0; i < s.text.size();) {
        const AddedToken* match = nullptr;
        if (!added_starts_[uint8_t(s.text[i])]) {
          ++i;
          continue;
        }
        for (const AddedToken& a : added_) {  // longest first
          if (a.normalized == normalized && s.text.compare(i, a.content.size(), a.content) == 0) {
            match = &a;
            break;
          }
        }
        if (match == nullptr) {
          ++i;
          continue;
        }
        if (i > done) next.push_back({s.text.substr(done, i - done), -1});
        next.push_back({match->content, match->id});
        i += match->content.size();
        done = i;
      }
      if (done < s.text.size()) next.push_back({s.text.substr(done), -1});
    }
    segments.swap(next);
  }
  for (const Segment& s : segments) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (absl::Status st = EncodeStretch(s.text, out); !st.ok()) {
      return st;
    }
  }
  return out;
}

absl::Status BpeTokenizer::EncodeStretch(std::string_view text,
                                         std::vector<int32_t>& out) const {
  std::vector<std::string_view> words = {text};
  for (const auto& split : splits_) {
    std::vector<std::string_view> finer;
    for (std::string_view word : words) {
      if (absl::Status st = split->Split(word, finer); !st.ok()) return st;
    }
    words.swap(finer);
  }
  for (std::string_view word : words) EncodeWord(word, out);
  return absl::OkStatus();
}

void BpeTokenizer::EncodeWord(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    std::string spelt;
    for (char c : word) spelt += ByteLevelSymbol(uint8_t(c));
    if (const auto it = ids_.find(spelt); it != ids_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  // The word's symbols as a linked list; a merge keeps the left symbol and unlinks the
  // right one. Candidates are popped lowest rank first, then leftmost (tokenizers'
  // Word::merge_all); one whose symbols have changed since it was pushed is stale.
  struct Symbol {
    int32_t id;
    int prev, next;
  };
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = {byte_ids_[uint8_t(word[i])], int(i) - 1,
                  i + 1 < word.size() ? int(i) + 1 : -1};
  }
  struct Candidate {
    int32_t rank;
    int left;
    int32_t left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto push = [&](int left) {
    if (left < 0 || symbols[left].next < 0) return;
    const int32_t a = symbols[left].id, b = symbols[symbols[left].next].id;
    if (const auto it = merges_.find(PairKey(a, b)); it != merges_.end()) {
      queue.push({it->second.rank, left, a, b, it->second.merged});
    }
  };
  for (int i = 0; i + 1 < int(word.size()); ++i) push(i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    if (left.id != c.left_id || left.next < 0 || symbols[left.next].id != c.right_id) {
      continue;
    }
    Symbol& right = symbols[left.next];
    left.id = c.merged;
    right.id = -1;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    push(left.prev);
    push(c.left);
  }
  for (int i = 0; i >= 0; i = symbols[i].next) out.push_back(symbols[i].id);
}

std::string BpeTokenizer::StreamBytes(int32_t id, bool& at_start) const {
  if (id < 0 || id >= int32_t(bytes_.size()) || special_[id]) return std::string();
  if (!bytes_[id].empty()) at_start = false;
  return bytes_[id];
}

std::string BpeTokenizer::Token(int32_t id) const {
  return id >= 0 && id < int32_t(tokens_.size()) ? tokens_[id] : std::string();
}

}  // namespace attnserve::tokenizer
