// libFuzzer target over request validation (server/service/admission.h and what the
// service checks before a handler touches the store): arbitrary bytes parsed as the
// request messages a client sends. The first byte picks the check, the rest is the
// message (or metadata value); tests/fuzz/fuzz_seeds.cc writes the seed corpus in this
// format.
//
// Besides "no crash, no sanitizer report", it checks what admission promises: an
// accepted request is inside every limit, every refusal has the documented code, and no
// error message echoes unbounded input (kMaxMessageBytes).
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "server/service/admission.h"
#include "server/service/api_keys.h"
#include "tests/fuzz/fuzz_models.h"

namespace attnserve::fuzz {
namespace {

using Metadata = std::multimap<grpc::string_ref, grpc::string_ref>;

// Longest error message any check may produce, whatever the input.
constexpr size_t kMaxMessageBytes = 1024;
constexpr char kKey[] = "fuzz-key-0123456789abcdef";
constexpr char kOtherKey[] = "other-key-0123456789abcdef";

service::RequestLimits Limits() {
  service::RequestLimits limits;
  limits.max_prompt_tokens = 100;  // small, so the fuzzer easily crosses it
  return limits;
}

void CheckMessage(const absl::Status& s, const char* what) {
  FUZZ_CHECK(s.message().size() <= kMaxMessageBytes, "%s: a %zu-byte error message: %.200s",
             what, s.message().size(), std::string(s.message()).c_str());
  FUZZ_CHECK(s.ok() || !s.message().empty(), "%s: an error without a message", what);
}

bool OneOf(const absl::Status& s, absl::StatusCode a, absl::StatusCode b) {
  return s.code() == a || s.code() == b;
}

void CheckMetadata(const std::string& header, const std::string& session_id) {
  Metadata metadata;
  metadata.emplace("x-session-id", grpc::string_ref(header.data(), header.size()));
  const absl::Status s = service::CheckSessionMetadata(metadata, session_id);
  CheckMessage(s, "CheckSessionMetadata");
  const bool agree = session_id.empty() || header == session_id;
  FUZZ_CHECK(s.ok() == agree, "CheckSessionMetadata: %s", s.ToString().c_str());
  FUZZ_CHECK(s.ok() || s.code() == absl::StatusCode::kInvalidArgument, "%s",
             s.ToString().c_str());
}

void FuzzGenerate(std::string_view bytes) {
  v1::GenerateRequest request;
  if (!request.ParseFromArray(bytes.data(), int(bytes.size()))) return;
  const service::RequestLimits limits = Limits();
  const catalogue::ModelCatalogue& catalogue = Catalogue();
  auto parsed = service::ParseGenerate(request, catalogue, limits);
  CheckMessage(parsed.status(), "ParseGenerate");
  CheckMetadata(request.model(), request.session_id());
  if (!parsed.ok()) {
    FUZZ_CHECK(OneOf(parsed.status(), absl::StatusCode::kInvalidArgument,
                     absl::StatusCode::kNotFound),
               "ParseGenerate: %s", parsed.status().ToString().c_str());
    return;
  }
  const scheduler::TurnRequest& turn = parsed->turn;
  FUZZ_CHECK(turn.prompt.size() <= size_t(limits.max_prompt_tokens), "prompt of %zu tokens",
             turn.prompt.size());
  FUZZ_CHECK(turn.max_tokens >= 1 && turn.max_tokens <= limits.max_generated_tokens,
             "max_tokens %d", turn.max_tokens);
  FUZZ_CHECK(std::isfinite(turn.sampling.temperature) && turn.sampling.temperature >= 0,
             "temperature %f", double(turn.sampling.temperature));
  FUZZ_CHECK(turn.sampling.top_p > 0 && turn.sampling.top_p <= 1, "top_p %f",
             double(turn.sampling.top_p));
  FUZZ_CHECK(turn.sampling.top_k >= 0, "top_k %d", turn.sampling.top_k);
  FUZZ_CHECK(turn.stop.size() <= size_t(limits.max_stop_strings), "%zu stop strings",
             turn.stop.size());
  for (const std::string& stop : turn.stop) {
    FUZZ_CHECK(!stop.empty() && stop.size() <= size_t(limits.max_stop_bytes),
               "a stop string of %zu bytes", stop.size());
  }
  if (request.session_id().empty()) {
    FUZZ_CHECK(parsed->model != nullptr, "no model for a request without a session");
    FUZZ_CHECK(!turn.prompt.empty(), "an empty prompt without a session");
    const int vocab = parsed->model->model->config().vocab_size;
    for (int32_t id : turn.prompt) FUZZ_CHECK(id >= 0 && id < vocab, "token %d", id);
  }

  // The checks against a session: a fresh one (position 0) on the requested model, or
  // on the default one when the request names a model that is not served.
  auto model = parsed->model;
  if (model == nullptr) {
    auto found = catalogue.Find(request.model());
    model = found.ok() ? *found : catalogue.all().front();
  }
  session::Session session("fuzz-session", attnserve::kDefaultTenant, model, absl::Now(),
                           absl::Minutes(1));
  const absl::Status fits = service::CheckTurnFits(*parsed, session);
  CheckMessage(fits, "CheckTurnFits");
  if (!fits.ok()) {
    FUZZ_CHECK(OneOf(fits, absl::StatusCode::kInvalidArgument, absl::StatusCode::kOutOfRange),
               "CheckTurnFits: %s", fits.ToString().c_str());
    return;
  }
  const auto& config = model->model->config();
  FUZZ_CHECK(!turn.prompt.empty(), "an empty prompt accepted at position 0");
  FUZZ_CHECK(int64_t(turn.prompt.size()) + 1 <= config.max_context,
             "a prompt of %zu tokens accepted with a context of %lld", turn.prompt.size(),
             static_cast<long long>(config.max_context));
  for (int32_t id : turn.prompt) {
    FUZZ_CHECK(id >= 0 && id < config.vocab_size, "token %d accepted", id);
  }
  FUZZ_CHECK(request.model().empty() || request.model() == model->name,
             "model '%s' accepted for a session on '%s'", request.model().c_str(),
             model->name.c_str());
}

void FuzzCreateSession(std::string_view bytes) {
  v1::CreateSessionRequest request;
  if (!request.ParseFromArray(bytes.data(), int(bytes.size()))) return;
  auto served = Catalogue().Resolve(request.model(), request.attention_module(),
                                    request.attention_order());
  CheckMessage(served.status(), "ModelCatalogue::Resolve");
  if (!served.ok()) {
    FUZZ_CHECK(OneOf(served.status(), absl::StatusCode::kInvalidArgument,
                     absl::StatusCode::kNotFound),
               "Resolve: %s", served.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(*served != nullptr, "Resolve returned null");
  FUZZ_CHECK(request.model().empty() || (*served)->name == request.model(),
             "asked for '%s', got '%s'", request.model().c_str(), (*served)->name.c_str());
  FUZZ_CHECK(request.attention_module().empty() ||
                 (*served)->attention() == request.attention_module(),
             "asked for module '%s', got '%s'", request.attention_module().c_str(),
             (*served)->attention().c_str());
}

void FuzzSessionId(std::string_view bytes) {
  // GetSession, CloseSession and ForkSession check only the id against the metadata
  // before the store looks it up; the metadata value is the message's own bytes.
  v1::ForkSessionRequest request;
  if (!request.ParseFromArray(bytes.data(), int(bytes.size()))) return;
  CheckMetadata(std::string(bytes), request.session_id());
  CheckMetadata(request.session_id(), request.session_id());
}

void FuzzSnapshotPrefix(std::string_view bytes) {
  // ImportSession reads the total size from the first chunk's first bytes before
  // buffering the rest.
  v1::ImportSessionRequest request;
  if (!request.ParseFromArray(bytes.data(), int(bytes.size()))) return;
  auto total = snapshot::SnapshotTotalBytes(request.data(), kMaxSnapshotBytes);
  CheckMessage(total.status(), "SnapshotTotalBytes");
  if (total.ok()) {
    FUZZ_CHECK(*total <= kMaxSnapshotBytes && *total >= snapshot::kSnapshotFixedHeaderBytes,
               "total %llu", static_cast<unsigned long long>(*total));
  } else {
    FUZZ_CHECK(OneOf(total.status(), absl::StatusCode::kInvalidArgument,
                     absl::StatusCode::kDataLoss),
               "SnapshotTotalBytes: %s", total.status().ToString().c_str());
  }
}

void FuzzAuthorization(std::string_view bytes) {
  static const service::ApiKeys* keys = [] {
    auto k = service::ApiKeys::Parse(
        absl::StrCat(kKey, " tenant-a max_sessions=4\n", kOtherKey,
                     " tenant-b max_state_bytes=1MiB\n"),
        "fuzz");
    FUZZ_CHECK(k.ok(), "%s", k.status().ToString().c_str());
    return new service::ApiKeys(std::move(k).value());
  }();
  Metadata metadata;
  metadata.emplace("authorization", grpc::string_ref(bytes.data(), bytes.size()));
  auto tenant = keys->Authenticate(metadata);
  CheckMessage(tenant.status(), "Authenticate");
  if (tenant.ok()) {
    FUZZ_CHECK(*tenant == "tenant-a" || *tenant == "tenant-b", "tenant '%s'",
               tenant->c_str());
  } else {
    FUZZ_CHECK(tenant.status().code() == absl::StatusCode::kUnauthenticated, "%s",
               tenant.status().ToString().c_str());
    const std::string message(tenant.status().message());
    for (const char* key : {kKey, kOtherKey}) {
      FUZZ_CHECK(message.find(key) == std::string::npos,
                 "the error repeats a key: %s", tenant.status().ToString().c_str());
    }
  }
  // The keys-file parser sees operator input, but it must not crash on any.
  auto parsed = service::ApiKeys::Parse(absl::string_view(bytes.data(), bytes.size()), "fuzz");
  (void)parsed;
}

}  // namespace
}  // namespace attnserve::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field that is not UTF-8; mutated inputs are full of them.
  google::protobuf::SetLogHandler(nullptr);
  attnserve::fuzz::Catalogue();  // build the models before the first input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 5) {
    case 0: attnserve::fuzz::FuzzGenerate(rest); break;
    case 1: attnserve::fuzz::FuzzCreateSession(rest); break;
    case 2: attnserve::fuzz::FuzzSessionId(rest); break;
    case 3: attnserve::fuzz::FuzzSnapshotPrefix(rest); break;
    case 4: attnserve::fuzz::FuzzAuthorization(rest); break;
  }
  return 0;
}
