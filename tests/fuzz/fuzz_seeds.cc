// Writes the seed corpus of the fuzz targets: `fuzz_seeds DIR` fills DIR/admission_fuzz/,
// DIR/snapshot_fuzz/ and DIR/safetensors_fuzz/ (created if absent). tests/fuzz/corpus/
// holds its output, committed; CI (tests/sanitizers/run.sh) also runs it before fuzzing,
// so the snapshot seeds always carry the current fingerprint of the tiny models even if
// the model code changes.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnserve/v1/attnserve.pb.h"
#include "server/common/crc32c.h"
#include "server/model/safetensors.h"
#include "server/snapshot/snapshot.h"
#include "tests/fuzz/fuzz_models.h"

namespace attnserve::fuzz {
namespace {

namespace fs = std::filesystem;

void Write(const fs::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  FUZZ_CHECK(out.good(), "cannot write %s", path.c_str());
}

// Selector byte + message, the admission target's input format.
std::string Admission(char selector, const google::protobuf::MessageLite& message) {
  return std::string(1, selector) + message.SerializeAsString();
}

std::string Snapshot(const catalogue::ServedModel& served, int tokens,
                     std::optional<int32_t> pending, const std::string& owner) {
  auto state = served.model->NewState();
  std::vector<int32_t> ids;
  for (int i = 0; i < tokens; ++i) ids.push_back(32 + (i * 7) % 90);
  if (!ids.empty()) {
    auto logits = served.model->Prefill(*state, ids);
    FUZZ_CHECK(logits.ok(), "%s", logits.status().ToString().c_str());
  }
  snapshot::SnapshotInfo info;
  info.pending_token = pending;
  info.ttl = absl::Minutes(5);
  info.owner = owner;
  return snapshot::EncodeSnapshot(served, state.get(), info);
}

std::string WithCrc(std::string bytes) {
  const uint32_t crc = Crc32c(0, bytes.data(), bytes.size() - 4);
  std::memcpy(bytes.data() + bytes.size() - 4, &crc, 4);
  return bytes;
}

// The same snapshot as format version 1 (no owner field; `bytes` must have none).
std::string AsVersion1(std::string bytes) {
  const uint32_t version = 1;
  std::memcpy(bytes.data() + 8, &version, 4);
  return WithCrc(std::move(bytes));
}

// Regression seed: a snapshot of a model this server does not serve (a fingerprint bit
// flipped) whose header names it with 2000 bytes; the refusal once echoed them all.
std::string UnknownModelWithLongName(const catalogue::ServedModel& served) {
  catalogue::ServedModel renamed = served;
  renamed.name = std::string(2000, 'm');
  std::string bytes = snapshot::EncodeSnapshot(renamed, nullptr, snapshot::SnapshotInfo{});
  bytes[24] ^= 1;  // the fingerprint starts at offset 24
  return WithCrc(std::move(bytes));
}

int Main(const fs::path& dir) {
  const catalogue::ModelCatalogue& catalogue = Catalogue();
  const catalogue::ServedModel& taylor = *catalogue.Find("tiny-taylor").value();
  const catalogue::ServedModel& softmax = *catalogue.Find("tiny-softmax").value();
  fs::create_directories(dir / "admission_fuzz");
  fs::create_directories(dir / "snapshot_fuzz");
  fs::create_directories(dir / "safetensors_fuzz");
  {  // Small files of each dtype the reader converts, with metadata.
    const std::vector<float> a = {1, -2, 0.5f, 3, 0, 65504, -0.25f, 8}, b = {7, 9};
    const model::SafetensorsTensor tensors[] = {{"model.embed_tokens.weight", {2, 4}, a.data()},
                                                {"model.norm.weight", {2}, b.data()},
                                                {"model.layers.0.self_attn.temperature", {}, b.data()}};
    for (auto [dtype, name] : {std::pair{model::SafetensorsDtype::kF32, "f32"},
                               {model::SafetensorsDtype::kF16, "f16"},
                               {model::SafetensorsDtype::kBF16, "bf16"}}) {
      Write(dir / "safetensors_fuzz" / name,
            model::SerializeSafetensors(tensors, dtype, {{"format", "pt"}}));
    }
  }

  const std::string snapshot = Snapshot(taylor, 5, 65, "tenant-a");
  Write(dir / "snapshot_fuzz" / "taylor-empty", Snapshot(taylor, 0, std::nullopt, ""));
  Write(dir / "snapshot_fuzz" / "taylor-5-pending", snapshot);
  Write(dir / "snapshot_fuzz" / "softmax-7-owner", Snapshot(softmax, 7, 10, "tenant-b"));
  Write(dir / "snapshot_fuzz" / "softmax-3-v1",
        AsVersion1(Snapshot(softmax, 3, std::nullopt, "")));
  // Regression seed: a KV cache at position 0 has empty tensors, whose restore once
  // passed a null pointer to memcpy.
  Write(dir / "snapshot_fuzz" / "regress-softmax-empty", Snapshot(softmax, 0, std::nullopt, ""));
  Write(dir / "snapshot_fuzz" / "regress-unknown-model-long-name",
        UnknownModelWithLongName(softmax));

  {
    v1::GenerateRequest r;
    r.set_text("In the beginning");
    auto* s = r.mutable_sampling();
    s->set_temperature(0.7f);
    s->set_top_k(5);
    s->set_top_p(0.9f);
    s->set_max_tokens(16);
    s->add_stop("\n\n");
    Write(dir / "admission_fuzz" / "generate-text", Admission(0, r));
  }
  {
    v1::GenerateRequest r;
    r.set_model("tiny-softmax");
    for (int id : {72, 101, 108, 108, 111}) r.mutable_tokens()->add_ids(id);
    r.set_logprobs(true);
    r.mutable_sampling()->set_stop_encoding(v1::STOP_ENCODING_HEX);
    r.mutable_sampling()->add_stop("0a0a");
    r.mutable_sampling()->set_ignore_eos(true);
    Write(dir / "admission_fuzz" / "generate-tokens-hex-stop", Admission(0, r));
  }
  {
    v1::GenerateRequest r;
    r.set_session_id("0123456789abcdef0123456789abcdef");
    r.set_model("tiny-taylor");
    r.mutable_sampling()->set_seed(42);
    Write(dir / "admission_fuzz" / "generate-continue", Admission(0, r));
  }
  {
    // Regression seed: a session turn naming another model by a 2000-byte name; the
    // refusal once echoed it all.
    v1::GenerateRequest r;
    r.set_session_id("0123456789abcdef0123456789abcdef");
    r.set_model(std::string(2000, 'm'));
    r.set_text("hi");
    Write(dir / "admission_fuzz" / "regress-session-long-model", Admission(0, r));
  }
  {
    v1::CreateSessionRequest r;
    r.set_model("tiny-taylor");
    r.set_attention_module("taylor");
    r.set_attention_order(2);
    r.set_ttl_seconds(60);
    Write(dir / "admission_fuzz" / "create-session", Admission(1, r));
  }
  {
    v1::ForkSessionRequest r;
    r.set_session_id("0123456789abcdef0123456789abcdef");
    r.set_ttl_seconds(10);
    Write(dir / "admission_fuzz" / "fork-session", Admission(2, r));
  }
  {
    v1::ImportSessionRequest r;
    r.set_data(snapshot.substr(0, snapshot::kSnapshotFixedHeaderBytes + 16));
    r.set_ttl_seconds(30);
    Write(dir / "admission_fuzz" / "import-first-chunk", Admission(3, r));
  }
  Write(dir / "admission_fuzz" / "authorization", "\x04" "Bearer fuzz-key-0123456789abcdef");
  std::printf("fuzz_seeds: wrote %s/admission_fuzz, %s/snapshot_fuzz and %s/safetensors_fuzz\n",
              dir.c_str(), dir.c_str(), dir.c_str());
  return 0;
}

}  // namespace
}  // namespace attnserve::fuzz

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  return attnserve::fuzz::Main(argv[1]);
}
