// Constrained decoding's cost per token (issue 32's benchmark): for three schemas (a flat
// object, a nested one, a recursive one), the time to compile each, then a simulated
// constrained answer over a real vocabulary — each step masks a row of logits with
// ConstraintState::ApplyMask (the scheduler's call) and takes the best allowed id under
// seeded random logits — cold (a grammar's first answer: its mask cache empty) and warm
// (the same schema's later answers). Prints a markdown table; asserts nothing. Run:
//   build/tests/bench/grammar_bench --gguf=FILE     (the GGUF's vocabulary, e.g. GPT-2's)
//   build/tests/bench/grammar_bench --bytes          (the byte models' vocabulary)
// tests/bench/grammar_bench.sh puts the figures beside the decode step they add to.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/grammar/constraint.h"
#include "server/grammar/json_schema.h"
#include "server/grammar/mask_cache.h"
#include "server/grammar/vocabulary.h"
#include "server/model/gguf.h"
#include "server/model/gguf_model.h"
#include "server/tokenizer/byte_tokenizer.h"
#include "server/tokenizer/gguf_vocab.h"

namespace attnserve {
namespace {

using Clock = std::chrono::steady_clock;
double Micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

const char* kFlat = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},"email":{"type":"string"},
  "active":{"type":"boolean"},"role":{"enum":["admin","user","guest"]}},
  "required":["name","age","email","active","role"],"additionalProperties":false})";
const char* kNested = R"({"type":"object","properties":{
  "order":{"type":"object","properties":{
    "id":{"type":"string"},
    "items":{"type":"array","minItems":1,"maxItems":4,"items":{"type":"object","properties":{
      "sku":{"type":"string"},"qty":{"type":"integer"},"price":{"type":"number"}},
      "required":["sku","qty","price"],"additionalProperties":false}},
    "shipping":{"type":"object","properties":{"city":{"type":"string"},
      "express":{"type":"boolean"}},"required":["city","express"],"additionalProperties":false}},
    "required":["id","items","shipping"],"additionalProperties":false}},
  "required":["order"],"additionalProperties":false})";
const char* kRecursive = R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
  "properties":{"label":{"type":"string"},"children":{"type":"array","maxItems":3,
  "items":{"$ref":"#/$defs/node"}}},"required":["label","children"],
  "additionalProperties":false}}})";

struct Run {
  int tokens = 0;
  bool complete = false;
  std::vector<double> step_us;  // ApplyMask per step
};

// One answer: masks a row of seeded random logits each step, takes the best allowed id.
Run Answer(const std::shared_ptr<const grammar::Grammar>& g, const grammar::Vocabulary& vocabulary,
           const std::vector<std::string>& bytes, uint64_t seed, int max_tokens) {
  grammar::ConstraintState state(grammar::Constraint{g, ""});
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  std::vector<float> logits(size_t(vocabulary.size()));
  Run run;
  for (; run.tokens < max_tokens; ++run.tokens) {
    for (float& l : logits) l = normal(rng);
    const auto t0 = Clock::now();
    if (!state.ApplyMask(logits.data(), int64_t(logits.size()), vocabulary).ok()) break;
    run.step_us.push_back(Micros(Clock::now() - t0));
    const int32_t id = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (std::find(vocabulary.eos_ids().begin(), vocabulary.eos_ids().end(), id) !=
        vocabulary.eos_ids().end()) {
      run.complete = true;
      break;
    }
    if (!state.Advance(bytes[size_t(id)]).ok()) break;
    if (state.MustEnd()) {
      run.complete = true;
      ++run.tokens;
      break;
    }
  }
  return run;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double Mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

int Main(int argc, char** argv) {
  std::string gguf;
  bool bytes_model = false;
  int answers = 8, max_tokens = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--gguf=", 0) == 0) gguf = a.substr(7);
    else if (a == "--bytes") bytes_model = true;
    else if (a.rfind("--answers=", 0) == 0) answers = std::stoi(a.substr(10));
    else if (a.rfind("--max_tokens=", 0) == 0) max_tokens = std::stoi(a.substr(13));
    else {
      std::fprintf(stderr, "usage: grammar_bench (--gguf=FILE | --bytes) [--answers=8] [--max_tokens=256]\n");
      return 2;
    }
  }
  std::shared_ptr<const tokenizer::Tokenizer> tok;
  std::string what;
  if (bytes_model) {
    tok = std::make_shared<tokenizer::ByteTokenizer>();
    what = "byte vocabulary";
  } else if (!gguf.empty()) {
    auto config = [&]() -> absl::StatusOr<model::ModelConfig> {
      std::string data;
      FILE* f = std::fopen(gguf.c_str(), "rb");
      if (!f) return absl::NotFoundError(gguf);
      // Only the header and metadata matter: the GGUF parser needs the whole file view.
      std::fseek(f, 0, SEEK_END);
      data.resize(size_t(std::ftell(f)));
      std::fseek(f, 0, SEEK_SET);
      if (std::fread(data.data(), 1, data.size(), f) != data.size()) data.clear();
      std::fclose(f);
      auto file = model::ParseGguf(data);
      if (!file.ok()) return file.status();
      auto c = model::GgufModelConfig(*file, "bench");
      if (!c.ok()) return c.status();
      auto t = tokenizer::LoadGgufTokenizer(*file, *c);
      if (!t.ok()) return t.status();
      tok = *t;
      return c;
    }();
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
      return 1;
    }
    what = gguf.substr(gguf.find_last_of('/') + 1);
  } else {
    std::fprintf(stderr, "usage: grammar_bench (--gguf=FILE | --bytes)\n");
    return 2;
  }
  std::vector<std::string> bytes(size_t(tok->vocab_size()));
  const auto v0 = Clock::now();
  for (int32_t id = 0; id < tok->vocab_size(); ++id) bytes[size_t(id)] = tok->TokenBytes(id);
  grammar::Vocabulary vocabulary(bytes, tok->eos_ids());
  const double vocab_ms = Micros(Clock::now() - v0) / 1000;
  std::printf("## Constrained decoding: mask cost per token (%s, %d ids; trie built in %.1f ms)\n\n",
              what.c_str(), tok->vocab_size(), vocab_ms);
  std::printf("%d answers per schema, at most %d tokens each; seeded random logits, best allowed id.\n\n",
              answers, max_tokens);
  std::printf("| schema | compile ms | tokens/answer | complete | cold µs/token (mean, median) | warm µs/token (mean, median) | masks cached |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const auto& [name, text] : {std::pair{"flat", kFlat}, std::pair{"nested", kNested},
                                   std::pair{"recursive", kRecursive}}) {
    const auto c0 = Clock::now();
    auto g = grammar::CompileJsonSchema(nlohmann::json::parse(text));
    const double compile_ms = Micros(Clock::now() - c0) / 1000;
    if (!g.ok()) {
      std::printf("| %s | refused: %s |\n", name, std::string(g.status().message()).c_str());
      continue;
    }
    // Cold: each answer's first sight of its states (the first answer on a new grammar);
    // warm: the same answers again, every state seen.
    std::vector<double> cold, warm;
    int tokens = 0, complete = 0;
    for (int a = 0; a < answers; ++a) {
      Run r = Answer(*g, vocabulary, bytes, uint64_t(a + 1), max_tokens);
      if (a == 0) cold = r.step_us;
      tokens += r.tokens;
      complete += r.complete;
    }
    for (int a = 0; a < answers; ++a) {
      Run r = Answer(*g, vocabulary, bytes, uint64_t(a + 1), max_tokens);
      warm.insert(warm.end(), r.step_us.begin(), r.step_us.end());
    }
    std::printf("| %s | %.2f | %.1f | %d/%d | %.0f, %.0f | %.0f, %.0f | %lld |\n", name, compile_ms,
                double(tokens) / answers, complete, answers, Mean(cold), Median(cold), Mean(warm),
                Median(warm), (long long)(*g)->mask_cache().misses());
  }
  return 0;
}

}  // namespace
}  // namespace attnserve

int main(int argc, char** argv) { return attnserve::Main(argc, argv); }
