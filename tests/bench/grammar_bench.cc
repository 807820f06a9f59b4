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

// The request bodies of issue 36 whose grammar work froze the engine, and two legitimate
// worst cases (a mask inside a JSON string walks nearly the whole trie; an object of
// 1,101 optional properties holds one parse stack per property after `{"`): the work
// each costs against the budgets of server/grammar/matcher.h.
struct Attack {
  const char* name;
  std::string schema;
  std::string prefix;  // the answer so far, where the mask is taken
};

std::vector<Attack> Attacks() {
  std::string defs, props;
  for (int i = 0; i < 40; ++i) {
    defs += "\"d" + std::to_string(i) + "\":{\"anyOf\":[{\"$ref\":\"#/$defs/d" +
            std::to_string(i + 1) + "\"},{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"}]},";
  }
  for (int i = 0; i < 1101; ++i) props += (i ? "," : "") + ("\"p" + std::to_string(i) + "\":{\"type\":\"integer\"}");
  return {
      {"pattern (?:\\|){27}", R"({"type":"string","pattern":"^(?:|){27}$"})", ""},
      {"pattern (?:\\|){40}", R"({"type":"string","pattern":"^(?:|){40}$"})", ""},
      {"40 nested anyOf of equal $refs", "{\"$ref\":\"#/$defs/d0\",\"$defs\":{" + defs + "\"d40\":{\"type\":\"integer\"}}}", ""},
      {"anyOf whose parses double per byte",
       R"({"$ref":"#/$defs/x","$defs":{"x":{"anyOf":[{"type":"array","items":{"$ref":"#/$defs/x"}},{"type":"array","items":{"$ref":"#/$defs/x"},"maxItems":3}]}}})",
       "[[[[[[[["},
      {"1,101 optional properties, after {\"", "{\"type\":\"object\",\"properties\":{" + props + "}}", "{\""},
      {"flat, inside a string", kFlat, "{\"name\":\"Ab"},
  };
}

void BoundedWork(const grammar::Vocabulary& vocabulary) {
  std::printf("\n## Bounded grammar work (%d ids)\n\n", vocabulary.size());
  std::printf("Budgets: %lld units and %lld stacks per byte, %lld per mask or step "
              "(server/grammar/matcher.h). The mask is cold (no cache), best of 3.\n\n",
              (long long)grammar::GrammarBudget::kByteWork, (long long)grammar::GrammarBudget::kMaxStacks,
              (long long)grammar::GrammarBudget::kStepWork);
  std::printf("| schema | compile ms | dry run | dry run ms | stacks at the mask | mask work units | mask ms | ns/unit | allowed ids |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const Attack& a : Attacks()) {
    const auto c0 = Clock::now();
    auto g = grammar::CompileJsonSchema(nlohmann::ordered_json::parse(a.schema));
    const double compile_ms = Micros(Clock::now() - c0) / 1000;
    if (!g.ok()) {
      std::printf("| %s | refused: %s |\n", a.name, std::string(g.status().message()).c_str());
      continue;
    }
    const auto d0 = Clock::now();
    const absl::Status dry = grammar::DryRun(**g);
    const double dry_ms = Micros(Clock::now() - d0) / 1000;
    grammar::Matcher m(*g);
    std::string verdict = dry.ok() ? "served" : "400";
    if (absl::Status st = m.Accept(a.prefix); !st.ok()) {
      std::printf("| %s | %.2f | %s | %.1f | prefix refused: %s |\n", a.name, compile_ms,
                  verdict.c_str(), dry_ms, std::string(st.message()).c_str());
      continue;
    }
    double best_ms = 1e30;
    int64_t units = 0;
    std::string allowed = "-";
    for (int rep = 0; rep < 3; ++rep) {
      grammar::Work work;
      const auto t0 = Clock::now();
      absl::StatusOr<grammar::TokenMask> mask = vocabulary.ComputeMask(m, work);
      best_ms = std::min(best_ms, Micros(Clock::now() - t0) / 1000);
      units = work.spent();
      if (mask.ok()) {
        int64_t n = 0;
        for (uint64_t w : *mask) n += __builtin_popcountll(w);
        allowed = std::to_string(n);
      } else {
        allowed = "over budget";
      }
    }
    std::printf("| %s | %.2f | %s | %.1f | %lld | %lld | %.2f | %.2f | %s |\n", a.name, compile_ms,
                verdict.c_str(), dry_ms, (long long)m.state().size(), (long long)units, best_ms,
                units > 0 ? best_ms * 1e6 / double(units) : 0.0, allowed.c_str());
  }
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
  BoundedWork(vocabulary);
  return 0;
}

}  // namespace
}  // namespace attnserve

int main(int argc, char** argv) { return attnserve::Main(argc, argv); }
