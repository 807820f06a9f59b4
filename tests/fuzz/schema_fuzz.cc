// libFuzzer target over the JSON Schema compiler (server/grammar/json_schema.h): arbitrary
// bytes as a request's schema. A schema is a client's input compiled on the server, so
// besides "no crash, no sanitizer report, no runaway" it checks what the compiler
// promises: a refusal is INVALID_ARGUMENT with a short message; an accepted schema's
// grammar writes JSON — a walk through it, taking at each step the first byte (from a
// seed-chosen start) the matcher accepts, ends in text that parses as JSON wherever the
// grammar may end. tests/fuzz/corpus/schema_fuzz/ holds seed schemas.
#include <cstddef>
#include <cstdint>
#include <string>

#include "nlohmann/json.hpp"
#include "server/grammar/json_schema.h"
#include "server/grammar/matcher.h"
#include "tests/fuzz/fuzz_check.h"

namespace attnserve::fuzz {
namespace {

constexpr size_t kMaxMessageBytes = 1024;
constexpr int kWalkBytes = 96;

void Run(const uint8_t* data, size_t size) {
  if (size < 1) return;
  const uint8_t start = data[0];  // where each step's byte search starts
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const nlohmann::ordered_json schema =
      nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) return;
  auto grammar = grammar::CompileJsonSchema(schema);
  if (!grammar.ok()) {
    FUZZ_CHECK(grammar.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               grammar.status().ToString().c_str());
    FUZZ_CHECK(grammar.status().message().size() <= kMaxMessageBytes, "a %zu-byte message",
               grammar.status().message().size());
    return;
  }
  grammar::Matcher m(*grammar);
  std::string out;
  for (int step = 0; step < kWalkBytes && !m.MustEnd(); ++step) {
    // Prefer ending the value once it may end, half the time (by the seed's parity).
    if (m.CanEnd() && (start & 1)) break;
    bool moved = false;
    for (int k = 0; k < 256 && !moved; ++k) {
      const char c = char(uint8_t(start + k));
      if (m.Accepts(std::string_view(&c, 1))) {
        FUZZ_CHECK(m.Accept(std::string_view(&c, 1)).ok(), "Accepts and Accept disagree");
        out.push_back(c);
        moved = true;
      }
    }
    FUZZ_CHECK(moved, "a state with no byte to go on and no end, after '%s'", out.c_str());
  }
  if (m.CanEnd()) {
    const auto parsed = nlohmann::json::parse(out, nullptr, /*allow_exceptions=*/false);
    FUZZ_CHECK(!parsed.is_discarded(), "the grammar of '%s' wrote '%s', which is not JSON",
               text.c_str(), out.c_str());
  }
}

}  // namespace
}  // namespace attnserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attnserve::fuzz::Run(data, size);
  return 0;
}
