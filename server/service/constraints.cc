#include "server/service/constraints.h"

#include <cstdio>
#include <utility>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "server/common/excerpt.h"
#include "server/grammar/json_schema.h"
#include "server/grammar/tool_calls.h"

namespace attnserve::service {
namespace {

// Schemas keep their members' order: the grammar writes properties in declared order.
using Json = nlohmann::ordered_json;

// `status` with its message after `field: ` (the code kept).
absl::Status Named(const std::string& field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// JSON text as a schema; `field` names it in the error.
absl::StatusOr<Json> ParseSchema(const std::string& text, const std::string& field) {
  Json schema = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (schema.is_discarded()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": not JSON text ('", Excerpt(text), "')"));
  }
  return schema;
}

absl::StatusOr<grammar::Constraint> CompileJsonObject() {
  grammar::GrammarBuilder builder;
  const int root = grammar::AddAnyJsonObject(builder);
  auto built = builder.Build(root);
  if (!built.ok()) return built.status();
  return grammar::Constraint{*std::move(built), ""};
}

absl::StatusOr<grammar::ToolCallSpec> ToolCallSpecOf(const v1::ToolCallConstraint& c) {
  const std::string field = "sampling.constraint.tool_calls";
  grammar::ToolCallSpec spec;
  for (int i = 0; i < c.functions_size(); ++i) {
    const v1::FunctionTool& f = c.functions(i);
    grammar::FunctionSpec function{f.name(), {}};
    if (!f.parameters_schema().empty()) {
      auto schema = ParseSchema(f.parameters_schema(),
                                absl::StrCat(field, ".functions[", i, "].parameters_schema"));
      if (!schema.ok()) return schema.status();
      function.parameters = decltype(function.parameters)(*std::move(schema));
    }
    spec.functions.push_back(std::move(function));
  }
  switch (c.choice()) {
    case v1::ToolCallConstraint::CHOICE_AUTO: spec.choice = grammar::ToolChoice::kAuto; break;
    case v1::ToolCallConstraint::CHOICE_REQUIRED: spec.choice = grammar::ToolChoice::kRequired; break;
    case v1::ToolCallConstraint::CHOICE_NAMED: spec.choice = grammar::ToolChoice::kNamed; break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, ".choice: unknown value ", int(c.choice()),
          "; valid: CHOICE_AUTO (0), CHOICE_REQUIRED (1), CHOICE_NAMED (2)"));
  }
  spec.function_name = c.function_name();
  spec.parallel = c.parallel();
  auto format = grammar::ToolCallFormatByName(c.format());
  if (!format.ok()) return Named(field + ".format", format.status());
  spec.format = *format;
  return spec;
}

absl::StatusOr<grammar::Constraint> Compile(const v1::Constraint& constraint) {
  switch (constraint.kind_case()) {
    case v1::Constraint::kJsonSchema: {
      const std::string field = "sampling.constraint.json_schema";
      auto schema = ParseSchema(constraint.json_schema(), field);
      if (!schema.ok()) return schema.status();
      auto grammar = grammar::CompileJsonSchema(*schema);
      if (!grammar.ok()) return Named(field, grammar.status());
      return grammar::Constraint{*std::move(grammar), ""};
    }
    case v1::Constraint::kJsonObject:
      if (!constraint.json_object()) {
        return absl::InvalidArgumentError(
            "sampling.constraint.json_object: must be true when set (unset it for free text)");
      }
      return CompileJsonObject();
    case v1::Constraint::kToolCalls: {
      auto spec = ToolCallSpecOf(constraint.tool_calls());
      if (!spec.ok()) return spec.status();
      auto compiled = grammar::CompileToolCalls(*spec);
      if (!compiled.ok()) return Named("sampling.constraint.tool_calls", compiled.status());
      return compiled;
    }
    case v1::Constraint::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("sampling.constraint: none of json_schema, json_object, "
                                    "tool_calls is set");
}

}  // namespace

const char* ConstraintKindName(const v1::Constraint& constraint) {
  switch (constraint.kind_case()) {
    case v1::Constraint::kJsonSchema: return "json_schema";
    case v1::Constraint::kJsonObject: return "json_object";
    case v1::Constraint::kToolCalls: return "tool_calls";
    case v1::Constraint::KIND_NOT_SET: break;
  }
  return "";
}

absl::StatusOr<grammar::Constraint> CompileConstraint(const v1::Constraint& constraint) {
  absl::StatusOr<grammar::Constraint> compiled = Compile(constraint);
  if (compiled.ok()) {
    // The dry run, here on the admitting thread: a grammar whose parse stacks grow past
    // their budget is refused now, not after its turn has entered the engine's batch.
    absl::Status dry = grammar::DryRun(*compiled->grammar);
    if (dry.ok()) return compiled;
    compiled = Named(absl::StrCat("sampling.constraint.", ConstraintKindName(constraint)), dry);
  }
  absl::Status refused = compiled.status();
  refused.SetPayload(kConstraintErrorPayload, absl::Cord(ConstraintKindName(constraint)));
  return refused;
}

absl::StatusOr<grammar::Constraint> ConstraintCache::Get(const v1::Constraint& constraint) {
  std::string key = constraint.SerializeAsString();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      ++stats_.hits;
      return it->second->second;
    }
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<grammar::Constraint> compiled = CompileConstraint(constraint);
  const int64_t micros = absl::ToInt64Microseconds(absl::Now() - start);
  // The first-token delay a new schema costs (the benchmark's "compile" figure).
  const std::string outcome =
      compiled.ok() ? absl::StrCat(compiled->grammar->rule_count(), " rules") : "refused";
  std::fprintf(stderr, "attnserve: constraint (%zu bytes) compiled in %.1f ms: %s\n",
               key.size(), micros / 1000.0, outcome.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.misses;
  stats_.compile_micros += micros;
  if (auto it = index_.find(key); it != index_.end()) return it->second->second;
  order_.emplace_front(key, compiled);
  index_.emplace(std::move(key), order_.begin());
  while (order_.size() > capacity_) {
    index_.erase(order_.back().first);
    order_.pop_back();
  }
  return compiled;
}

ConstraintCache::Stats ConstraintCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  Stats s = stats_;
  s.entries = order_.size();
  return s;
}

ConstraintCache& SharedConstraintCache() {
  // Each grammar keeps its token masks (up to Grammar::MaskCache::kMaxBytes, 16 MiB), so
  // the entries bound the memory as well: 16 x 16 MiB at worst. An application sends a
  // few schemas again and again; 16 holds them.
  static ConstraintCache* cache = new ConstraintCache(16);
  return *cache;
}

}  // namespace attnserve::service
