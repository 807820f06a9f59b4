// SentencePieceTokenizer against the library it wraps, on vocabularies trained here
// with spm_train: a Llama-style one (identity normalization, extra whitespace kept,
// dummy prefix) and spm_train's defaults (NFKC, extra whitespace removed).
// tokenizer_oracle_test checks the same against python3-sentencepiece.
#include "server/tokenizer/sentencepiece_tokenizer.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/testing/spm_model.h"

namespace attnserve::tokenizer {
namespace {

constexpr char kLlamaFlags[] =
    "--normalization_rule_name=identity --remove_extra_whitespaces=false";

// SentencePiece's Decode shows each byte of an invalid UTF-8 sequence that came from
// byte pieces as U+FFFD (sentencepiece_processor.cc, ProcessBytePieces, with
// string_util::DecodeUTF8's rules); the stream carries the raw bytes. This applies the
// library's rule to the stream, to compare the two.
std::string ReplaceInvalidUtf8(const std::string& s) {
  const auto trail = [&](size_t i) { return i < s.size() && (uint8_t(s[i]) & 0xC0) == 0x80; };
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const uint8_t b = uint8_t(s[i]);
    size_t n = 0;
    uint32_t cp = 0;
    if (b < 0x80) {
      n = 1;
    } else if ((b & 0xE0) == 0xC0 && trail(i + 1)) {
      cp = (b & 0x1F) << 6 | (uint8_t(s[i + 1]) & 0x3F);
      n = cp >= 0x80 ? 2 : 0;
    } else if ((b & 0xF0) == 0xE0 && trail(i + 1) && trail(i + 2)) {
      cp = (b & 0x0F) << 12 | (uint8_t(s[i + 1]) & 0x3F) << 6 | (uint8_t(s[i + 2]) & 0x3F);
      n = cp >= 0x800 && (cp < 0xD800 || cp >= 0xE000) ? 3 : 0;
    } else if ((b & 0xF8) == 0xF0 && trail(i + 1) && trail(i + 2) && trail(i + 3)) {
      cp = (b & 0x07) << 18 | (uint8_t(s[i + 1]) & 0x3F) << 12 |
           (uint8_t(s[i + 2]) & 0x3F) << 6 | (uint8_t(s[i + 3]) & 0x3F);
      n = cp >= 0x10000 && cp <= 0x10FFFF ? 4 : 0;
    }
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

const std::vector<std::string>& Texts() {
  static const std::vector<std::string> texts = {
      "In the beginning God created the heaven and the earth.",
      "hello",
      " leading space",
      "  two leading spaces",
      "trailing space ",
      "inner   spaces",
      "line one\nline two\n",
      "\n",
      " ",
      "café naïve über",
      "日本語のテキスト",
      "emoji 😀 and 🇫🇷 flags",
      "tab\tseparated",
      "<s> and </s> are text here",
      "x",
  };
  return texts;
}

class SentencePieceTokenizerTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test_util::MakeTempDir("spm"));
    llama_ = new std::string(test_util::ReadBytes(test_util::TrainSpm(*dir_, "llama", kLlamaFlags)));
    plain_ = new std::string(test_util::ReadBytes(test_util::TrainSpm(*dir_, "plain")));
  }
  void SetUp() override { ATTNSERVE_SKIP_WITHOUT_SENTENCEPIECE(); }
  static void TearDownTestSuite() {
    delete dir_;
    delete llama_;
    delete plain_;
  }

  static std::shared_ptr<const SentencePieceTokenizer> Make(const std::string& model,
                                                           bool add_bos = true) {
    SentencePieceTokenizer::Options options;
    options.add_bos = add_bos;
    options.bos_token_id = 1;
    options.eos_token_ids = {2};
    auto t = SentencePieceTokenizer::Create(model, options);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : nullptr;
  }

  static std::vector<int32_t> Ids(const Tokenizer& t, std::string_view text, bool cont) {
    auto ids = t.Encode(text, cont);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>();
  }

  static std::string Stream(const Tokenizer& t, const std::vector<int32_t>& ids,
                            bool text_started = false) {
    StreamDecoder decoder(t, text_started);
    std::string out;
    for (int32_t id : ids) out += decoder.Next(id);
    return out;
  }

  static std::string* dir_;
  static std::string* llama_;
  static std::string* plain_;
};

std::string* SentencePieceTokenizerTest::dir_;
std::string* SentencePieceTokenizerTest::llama_;
std::string* SentencePieceTokenizerTest::plain_;

TEST_F(SentencePieceTokenizerTest, ReportsItsVocabularyAndSpecialIds) {
  auto t = Make(*llama_);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->kind(), "sentencepiece");
  EXPECT_EQ(t->vocab_size(), 320);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_ids(), std::vector<int32_t>{2});
  EXPECT_TRUE(t->IsEos(2));
  EXPECT_EQ(t->Piece(1), "<s>");
  EXPECT_EQ(t->Piece(3), "<0x00>");
}

TEST_F(SentencePieceTokenizerTest, EncodeStartsWithBosOnlyWhenAsked) {
  auto with = Make(*llama_, true);
  auto without = Make(*llama_, false);
  const auto a = Ids(*with, "the earth", false);
  const auto b = Ids(*without, "the earth", false);
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(a.front(), 1);
  EXPECT_EQ(std::vector<int32_t>(a.begin() + 1, a.end()), b);
  EXPECT_NE(b.front(), 1);
  EXPECT_EQ(Ids(*with, "", false), std::vector<int32_t>{1});
  // A continuation never starts with BOS.
  EXPECT_NE(Ids(*with, "the earth", true).front(), 1);
}

TEST_F(SentencePieceTokenizerTest, ContinuationHasNoDummyPrefix) {
  auto t = Make(*llama_, false);
  // First text: "▁the" (dummy prefix); continuation: "the" glued to what came before.
  const auto first = Ids(*t, "the", false);
  const auto cont = Ids(*t, "the", true);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(cont.empty());
  EXPECT_EQ(t->Piece(first.front()).rfind("\xe2\x96\x81", 0), 0u) << t->Piece(first.front());
  EXPECT_NE(t->Piece(cont.front()).rfind("\xe2\x96\x81", 0), 0u) << t->Piece(cont.front());
  // A session's text is the concatenation of its turns.
  std::vector<int32_t> session = Ids(*t, "In the", false);
  const std::string turns[] = {" beginning", " God", " created\nthe", "", " heaven.", " "};
  std::string text = "In the";
  for (const std::string& turn : turns) {
    const auto ids = Ids(*t, turn, true);
    session.insert(session.end(), ids.begin(), ids.end());
    text += turn;
  }
  EXPECT_EQ(t->LibraryDecode(session), text);
  EXPECT_EQ(Stream(*t, session), text);
}

TEST_F(SentencePieceTokenizerTest, StreamedBytesEqualTheLibrarysDecodingOfEncodedText) {
  for (const std::string* model : {llama_, plain_}) {
    auto t = Make(*model);
    for (const std::string& text : Texts()) {
      const auto ids = Ids(*t, text, false);
      const std::string decoded = t->LibraryDecode(ids);
      EXPECT_EQ(Stream(*t, ids), decoded) << text;
      if (model == llama_) {
        EXPECT_EQ(decoded, text);  // identity normalization
      }
      const auto cont = Ids(*t, text, true);
      EXPECT_EQ(Stream(*t, cont), t->LibraryDecode(cont)) << text;
    }
  }
}

TEST_F(SentencePieceTokenizerTest, ByteFallbackPiecesStreamOneRawByteEach) {
  auto t = Make(*llama_, false);
  const auto ids = Ids(*t, "😀", false);  // not in the training text: bytes
  std::vector<std::string> bytes;
  StreamDecoder decoder(*t, false);
  for (int32_t id : ids) bytes.push_back(decoder.Next(id));
  // "▁" then F0 9F 98 80, one byte per piece.
  ASSERT_EQ(bytes.size(), 5u) << testing::PrintToString(bytes);
  EXPECT_EQ(t->Piece(ids[1]), "<0xF0>");
  EXPECT_EQ(bytes[0], "");  // the dummy prefix of the first piece
  EXPECT_EQ(bytes[1], "\xF0");
  EXPECT_EQ(bytes[4], "\x80");
}

TEST_F(SentencePieceTokenizerTest, LeadingSpaceRuleAppliesOnlyAtTheStartOfTheText) {
  auto t = Make(*llama_, false);
  const auto ids = Ids(*t, "the earth", false);
  EXPECT_EQ(Stream(*t, ids), "the earth");
  EXPECT_EQ(Stream(*t, ids, /*text_started=*/true), " the earth");
  // Control pieces before the first piece do not end the start.
  std::vector<int32_t> with_bos = {1};
  with_bos.insert(with_bos.end(), ids.begin(), ids.end());
  EXPECT_EQ(Stream(*t, with_bos), "the earth");
  EXPECT_EQ(t->LibraryDecode(with_bos), "the earth");
  // " x" is "▁" "▁x"-like: only the first "▁" goes.
  const auto spaced = Ids(*t, " the", false);
  EXPECT_EQ(Stream(*t, spaced), t->LibraryDecode(spaced));
  EXPECT_EQ(Stream(*t, spaced), " the");
}

TEST_F(SentencePieceTokenizerTest, StreamedBytesEqualTheLibrarysDecodingOfRandomIds) {
  std::mt19937 rng(11);
  for (const std::string* model : {llama_, plain_}) {
    auto t = Make(*model);
    for (int trial = 0; trial < 500; ++trial) {
      std::vector<int32_t> ids(1 + rng() % 12);
      for (int32_t& id : ids) id = int32_t(rng() % uint32_t(t->vocab_size()));
      if (trial % 3 == 0) {  // mostly byte pieces: valid and invalid UTF-8
        for (int32_t& id : ids) id = 3 + int32_t(rng() % 256);
      }
      const std::string stream = Stream(*t, ids);
      EXPECT_EQ(ReplaceInvalidUtf8(stream), t->LibraryDecode(ids))
          << testing::PrintToString(ids);
      EXPECT_EQ(Decode(*t, ids).value(), stream);
    }
  }
}

TEST_F(SentencePieceTokenizerTest, UnknownAndOutOfRangeIds) {
  auto t = Make(*llama_, false);
  EXPECT_EQ(t->TokenBytes(0), t->LibraryDecode({0}));  // <unk>: " ⁇ "
  EXPECT_EQ(t->TokenBytes(0), " \xE2\x81\x87 ");
  EXPECT_EQ(t->TokenBytes(2), "");  // </s>
  EXPECT_EQ(t->TokenBytes(320), "");
  EXPECT_EQ(t->TokenBytes(-1), "");
  EXPECT_FALSE(Decode(*t, {5, 320}).ok());
}

TEST_F(SentencePieceTokenizerTest, ConfigIdsThatAreNotSpecialPiecesFallBackToTheModels) {
  SentencePieceTokenizer::Options options;
  options.bos_token_id = 256;  // the byte tokenizer's defaults: byte pieces here
  options.eos_token_ids = {257};
  auto t = SentencePieceTokenizer::Create(*llama_, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), 1);
  EXPECT_EQ((*t)->eos_ids(), std::vector<int32_t>{2});
  options.bos_token_id = -1;
  options.add_bos = false;
  options.eos_token_ids = {2, 1};  // several end ids: all kept
  t = SentencePieceTokenizer::Create(*llama_, options);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->bos_id(), -1);
  EXPECT_EQ((*t)->eos_ids(), (std::vector<int32_t>{2, 1}));
}

TEST_F(SentencePieceTokenizerTest, RefusesWhatItCannotServe) {
  SentencePieceTokenizer::Options options;
  EXPECT_EQ(SentencePieceTokenizer::Create("not a model", options).status().code(),
            absl::StatusCode::kDataLoss);
  const std::string no_bos = test_util::ReadBytes(
      test_util::TrainSpm(*dir_, "nobos", "--bos_id=-1 --eos_id=-1 --unk_id=0"));
  options.bos_token_id = 5;
  options.add_bos = true;
  EXPECT_EQ(SentencePieceTokenizer::Create(no_bos, options).status().message(),
            "tokenizer.model: no end-of-sequence id: the model config's eos_token_id names "
            "no control or user-defined piece and the model has no </s>");
  options.eos_token_ids = {};
  const std::string no_bos_with_eos =
      test_util::ReadBytes(test_util::TrainSpm(*dir_, "nobos2", "--bos_id=-1"));
  EXPECT_EQ(SentencePieceTokenizer::Create(no_bos_with_eos, options).status().message(),
            "tokenizer.model: add_bos_token is true but there is no BOS id (bos_token_id, "
            "or <s> in the model)");
}

}  // namespace
}  // namespace attnserve::tokenizer
