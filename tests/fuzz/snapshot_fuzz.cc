// libFuzzer target over snapshot decoding (server/snapshot/snapshot.h): SnapshotTotalBytes,
// SnapshotOwner, VerifySnapshot and, for what verifies, RestoreSnapshotState, against a
// catalogue of two tiny models (tests/fuzz/fuzz_models.h). The seed corpus is snapshots
// of those models (tests/fuzz/fuzz_seeds.cc).
//
// Each input is tried as is, and again with its declared size and CRC-32C rewritten to
// match, so mutations get past the checksum and reach the section parser. Whatever
// verifies must restore to a state of the declared position and re-encode to a snapshot
// that verifies with the same position, pending token and owner.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "server/common/crc32c.h"
#include "server/snapshot/snapshot.h"
#include "tests/fuzz/fuzz_models.h"

namespace attnserve::fuzz {
namespace {

constexpr size_t kMaxMessageBytes = 1024;

void CheckMessage(const absl::Status& s, const char* what) {
  FUZZ_CHECK(s.message().size() <= kMaxMessageBytes, "%s: a %zu-byte error message", what,
             s.message().size());
}

void Check(std::string bytes) {
  auto total = snapshot::SnapshotTotalBytes(bytes, kMaxSnapshotBytes);
  CheckMessage(total.status(), "SnapshotTotalBytes");
  auto owner = snapshot::SnapshotOwner(bytes);
  CheckMessage(owner.status(), "SnapshotOwner");
  if (owner.ok()) {
    FUZZ_CHECK(!owner->empty() && owner->size() <= snapshot::kMaxSnapshotOwnerBytes,
               "owner of %zu bytes", owner->size());
  }

  const catalogue::ModelCatalogue& catalogue = Catalogue();
  auto verified = snapshot::VerifySnapshot(std::make_shared<const std::string>(bytes),
                                          catalogue, kMaxSnapshotBytes);
  CheckMessage(verified.status(), "VerifySnapshot");
  if (!verified.ok()) {
    const absl::StatusCode code = verified.status().code();
    FUZZ_CHECK(code == absl::StatusCode::kInvalidArgument ||
                   code == absl::StatusCode::kDataLoss ||
                   code == absl::StatusCode::kFailedPrecondition,
               "VerifySnapshot: %s", verified.status().ToString().c_str());
    return;
  }
  FUZZ_CHECK(total.ok() && *total == bytes.size(), "verified, but SnapshotTotalBytes: %s",
             total.status().ToString().c_str());
  FUZZ_CHECK(owner.ok() && *owner == verified->info.owner, "owner '%s' vs '%s'",
             owner.ok() ? owner->c_str() : owner.status().ToString().c_str(),
             verified->info.owner.c_str());
  const catalogue::ServedModel& served = *verified->model;
  const model::ModelConfig& config = served.model->config();
  FUZZ_CHECK(verified->info.position >= 0 && verified->info.position <= config.max_context,
             "position %lld", static_cast<long long>(verified->info.position));
  if (verified->info.pending_token) {
    FUZZ_CHECK(*verified->info.pending_token >= 0 &&
                   *verified->info.pending_token < config.vocab_size,
               "pending token %d", *verified->info.pending_token);
  }

  auto state = snapshot::RestoreSnapshotState(*verified);
  FUZZ_CHECK(state.ok(), "verified, but RestoreSnapshotState: %s",
             state.status().ToString().c_str());
  FUZZ_CHECK((*state)->position() == verified->info.position, "restored at %lld, not %lld",
             static_cast<long long>((*state)->position()),
             static_cast<long long>(verified->info.position));
  FUZZ_CHECK((*state)->Bytes() >= 0, "negative state bytes");

  const std::string again = snapshot::EncodeSnapshot(served, state->get(), verified->info);
  auto reverified = snapshot::VerifySnapshot(std::make_shared<const std::string>(again),
                                            catalogue, kMaxSnapshotBytes);
  FUZZ_CHECK(reverified.ok(), "a restored state re-encodes to a refused snapshot: %s",
             reverified.status().ToString().c_str());
  FUZZ_CHECK(reverified->model == verified->model, "another model after re-encoding");
  FUZZ_CHECK(reverified->info.position == verified->info.position &&
                 reverified->info.pending_token == verified->info.pending_token &&
                 reverified->info.owner == verified->info.owner &&
                 reverified->info.ttl == verified->info.ttl &&
                 reverified->state_bytes == verified->state_bytes,
             "re-encoding changed the session");
}

}  // namespace
}  // namespace attnserve::fuzz

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Protobuf logs every string field that is not UTF-8; mutated inputs are full of them.
  google::protobuf::SetLogHandler(nullptr);
  attnserve::fuzz::Catalogue();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(reinterpret_cast<const char*>(data), size);
  attnserve::fuzz::Check(bytes);
  // Again with total_bytes (offset 16) and the trailing CRC-32C made to agree.
  if (bytes.size() >= attnserve::snapshot::kSnapshotFixedHeaderBytes + 4) {
    const uint64_t total = bytes.size();
    std::memcpy(bytes.data() + 16, &total, sizeof total);
    const uint32_t crc = attnserve::Crc32c(0, bytes.data(), bytes.size() - 4);
    std::memcpy(bytes.data() + bytes.size() - 4, &crc, sizeof crc);
    attnserve::fuzz::Check(std::move(bytes));
  }
  return 0;
}
