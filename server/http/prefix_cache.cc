#include "server/http/prefix_cache.h"

#include <algorithm>
#include <functional>

#include "nlohmann/json.hpp"
#include "server/common/sha256.h"

namespace attnserve::http {
namespace {

using nlohmann::json;

constexpr char kMagic[] = "attnserve-prefix/2\n";
constexpr size_t kMagicBytes = sizeof(kMagic) - 1;

void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(char((v >> (8 * i)) & 0xff));
}
uint64_t GetU64(const std::string& s, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(s[at + i])) << (8 * i);
  return v;
}

}  // namespace

std::string PrefixCache::KeyOf(const PrefixKey& key, absl::Span<const int32_t> ids) {
  Sha256 h;
  // Each field with its length first, so that no two keys hash the same bytes.
  for (const std::string* field : {&key.tenant, &key.fingerprint, &key.chat_template}) {
    std::string length;
    PutU64(&length, field->size());
    h.Update(length);
    h.Update(*field);
  }
  std::string bytes;
  bytes.reserve(ids.size() * 4);
  for (int32_t id : ids) {
    for (int i = 0; i < 4; ++i) bytes.push_back(char((uint32_t(id) >> (8 * i)) & 0xff));
  }
  h.Update(bytes);
  return "pfx_" + DigestHex(h.Finish());
}

std::string PrefixCache::Encode(const PrefixKey& key, absl::Span<const int32_t> ids,
                                const std::string& state) {
  const std::string header = json{{"tenant", key.tenant},
                                  {"fingerprint", key.fingerprint},
                                  {"chat_template", key.chat_template},
                                  {"tokens", ids.size()}}
                                 .dump();
  std::string out(kMagic, kMagicBytes);
  PutU64(&out, header.size());
  out += header;
  for (int32_t id : ids) {
    for (int i = 0; i < 4; ++i) out.push_back(char((uint32_t(id) >> (8 * i)) & 0xff));
  }
  out += state;
  return out;
}

std::optional<std::string_view> PrefixCache::Match(const std::string& record,
                                                   const PrefixKey& key,
                                                   absl::Span<const int32_t> ids) {
  if (record.size() < kMagicBytes + 8 || record.compare(0, kMagicBytes, kMagic) != 0) {
    return std::nullopt;
  }
  const uint64_t n = GetU64(record, kMagicBytes);
  size_t at = kMagicBytes + 8;
  if (n > record.size() - at) return std::nullopt;
  json header = json::parse(record.substr(at, n), nullptr, /*allow_exceptions=*/false);
  at += n;
  if (!header.is_object() || header.value("tenant", "") != key.tenant ||
      header.value("fingerprint", "") != key.fingerprint ||
      header.value("chat_template", "") != key.chat_template ||
      header.value("tokens", uint64_t{0}) != ids.size() ||
      ids.size() * 4 > record.size() - at) {
    return std::nullopt;
  }
  for (int32_t id : ids) {
    uint32_t stored = 0;
    for (int i = 0; i < 4; ++i) stored |= uint32_t(uint8_t(record[at + i])) << (8 * i);
    if (int32_t(stored) != id) return std::nullopt;
    at += 4;
  }
  return std::string_view(record).substr(at);
}

std::optional<PrefixCache::Hit> PrefixCache::Lookup(const PrefixKey& key,
                                                    absl::Span<const int32_t> ids,
                                                    std::vector<size_t> lengths) const {
  std::sort(lengths.begin(), lengths.end(), std::greater<size_t>());
  lengths.erase(std::unique(lengths.begin(), lengths.end()), lengths.end());
  for (size_t length : lengths) {
    if (length == 0 || length > ids.size()) continue;
    const absl::Span<const int32_t> prefix = ids.subspan(0, length);
    auto record = checkpoints_->Get(key.tenant, KeyOf(key, prefix));
    if (!record.ok()) continue;
    if (auto state = Match(**record, key, prefix)) {
      const size_t offset = size_t(state->data() - (*record)->data());
      return Hit{length, snapshot::SnapshotBytes(*std::move(record), offset)};
    }
  }
  return std::nullopt;
}

absl::Status PrefixCache::Save(const PrefixKey& key, absl::Span<const int32_t> ids,
                               std::shared_ptr<const std::string> state) const {
  auto record = std::make_shared<const std::string>(Encode(key, ids, *state));
  return checkpoints_->Put(key.tenant, KeyOf(key, ids), std::move(record), ttl_, state->size());
}

}  // namespace attnserve::http
