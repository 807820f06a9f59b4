// What a JSON Schema's grammar writes and accepts, for schema_oracle_test.mjs (Ajv judges
// the results): one job a line on stdin, one result a line on stdout.
//
//   in:  {"schema": S, "samples": N, "seed": K, "max_bytes": M, "end_probability": P,
//         "check": ["<hex>", ...]}
//   out: {"error": "<compile error>"}  or
//        {"samples": ["<hex>", ...], "check": [true, false, ...], "rules": R}
//
// A sample walks the Matcher byte by byte with a seeded RNG: at each step a byte drawn
// uniformly from those the grammar accepts; it stops where the grammar must end, or may
// end with probability P. Past M/2 bytes it closes: each byte is one on a shortest way to
// the end (the grammar's shortest completions, computed from its rules), so that every
// sample ends within M bytes. Samples and checked documents are hex, so that bytes that
// are not UTF-8 would show as they are. A checked document is accepted when the grammar
// takes all of it and may end there.
#include <cstdio>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "server/grammar/json_schema.h"
#include "server/grammar/matcher.h"

namespace attnserve::grammar {
namespace {

using json = nlohmann::ordered_json;
constexpr int64_t kInf = std::numeric_limits<int64_t>::max() / 4;

// The fewest bytes that finish each rule, and each position's alternative from there.
class Completions {
 public:
  explicit Completions(const Grammar& g) : g_(g), rule_(size_t(g.rule_count()), kInf) {
    for (bool changed = true; changed;) {
      changed = false;
      for (int r = 0; r < g.rule_count(); ++r) {
        for (int32_t p : g.alternatives(r)) {
          const int64_t n = Rest(p);
          if (n < rule_[size_t(r)]) {
            rule_[size_t(r)] = n;
            changed = true;
          }
        }
      }
    }
  }
  // Bytes left at least, over the state's stacks.
  int64_t Remaining(const StackSet& s) const {
    int64_t best = kInf;
    for (size_t i = 0; i < s.data.size();) {
      const size_t len = size_t(s.data[i]);
      int64_t sum = 0;
      for (size_t k = 0; k < len; ++k) sum = std::min(kInf, sum + Rest(s.data[i + 1 + k]));
      best = std::min(best, sum);
      i += 1 + len;
    }
    return best;
  }

 private:
  int64_t Rest(int32_t p) const {
    int64_t sum = 0;
    for (;; ++p) {
      const Grammar::Element& e = g_.elements()[size_t(p)];
      if (e.kind == Grammar::Element::Kind::kEnd) return sum;
      sum = std::min(kInf, sum + (e.kind == Grammar::Element::Kind::kBytes ? 1 : rule_[size_t(e.index)]));
    }
  }
  const Grammar& g_;
  std::vector<int64_t> rule_;
};

std::string Hex(const std::string& bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  for (char c : bytes) {
    out += kDigits[uint8_t(c) >> 4];
    out += kDigits[uint8_t(c) & 15];
  }
  return out;
}

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) out += char(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

// The bytes the state accepts: the union of its stacks' top byte sets.
ByteSet Accepted(const Grammar& g, const StackSet& s) {
  ByteSet out;
  for (size_t i = 0; i < s.data.size();) {
    const size_t len = size_t(s.data[i]);
    if (len > 0) out |= g.byte_sets()[size_t(g.elements()[size_t(s.data[i + len])].index)];
    i += 1 + len;
  }
  return out;
}

std::string Sample(const std::shared_ptr<const Grammar>& g, const Completions& c, std::mt19937_64& rng,
                   int max_bytes, double end_probability) {
  Matcher m(g);
  std::string text;
  std::uniform_real_distribution<double> coin(0, 1);
  while (!m.MustEnd()) {
    const bool closing = int(text.size()) >= max_bytes / 2;
    if (m.CanEnd() && (closing || coin(rng) < end_probability)) break;
    const ByteSet accepted = Accepted(*g, m.state());
    std::vector<int> bytes;
    for (int b = 0; b < 256; ++b) {
      if (accepted.test(size_t(b))) bytes.push_back(b);
    }
    if (bytes.empty()) break;
    if (closing) {  // only bytes on a shortest way to the end
      std::vector<int> best;
      int64_t least = kInf;
      StackSet next;
      for (int b : bytes) {
        if (!Matcher::Advance(*g, m.state(), uint8_t(b), next)) continue;
        const int64_t r = c.Remaining(next);
        if (r < least) best.clear();
        if (r <= least) best.push_back(b), least = r;
      }
      bytes = best;
    }
    const char byte = char(bytes[std::uniform_int_distribution<size_t>(0, bytes.size() - 1)(rng)]);
    if (!m.Accept(std::string(1, byte)).ok()) break;
    text += byte;
  }
  return text;
}

json Run(const json& job) {
  JsonSchemaOptions options;
  absl::StatusOr<std::shared_ptr<const Grammar>> g = CompileJsonSchema(job.at("schema"), options);
  if (!g.ok()) return {{"error", std::string(g.status().message())}};
  json out = {{"rules", (*g)->rule_count()}};
  const Completions completions(**g);
  std::mt19937_64 rng(job.value("seed", 1));
  json samples = json::array();
  for (int i = 0; i < job.value("samples", 0); ++i) {
    samples.push_back(Hex(Sample(*g, completions, rng, job.value("max_bytes", 400),
                                 job.value("end_probability", 0.3))));
  }
  out["samples"] = std::move(samples);
  json verdicts = json::array();
  for (const json& doc : job.value("check", json::array())) {
    Matcher m(*g);
    verdicts.push_back(m.Accept(Unhex(doc.get<std::string>())).ok() && m.CanEnd());
  }
  out["check"] = std::move(verdicts);
  return out;
}

}  // namespace
}  // namespace attnserve::grammar

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const auto job = nlohmann::ordered_json::parse(line);
    std::cout << attnserve::grammar::Run(job).dump() << "\n" << std::flush;
  }
  return 0;
}
