#include "server/store/state_pages.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/common/sha256.h"
#include "server/store/record_kind.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "state pages read and write host integers as little-endian");

namespace attnserve::store {
namespace {

constexpr char kSnapshotMagic[8] = {'A', 'T', 'T', 'N', 'S', 'N', 'A', 'P'};
constexpr char kStubMagic[8] = {'A', 'T', 'T', 'N', 'S', 'T', 'U', 'B'};
constexpr char kRecordMagic[8] = {'A', 'T', 'T', 'N', 'P', 'R', 'E', 'C'};
constexpr uint32_t kStubVersion = 1;
constexpr char kKeyDomain[] = "attnserve page v1";
// Snapshot header offsets (SNAPSHOT.md).
constexpr size_t kVersionAt = 8, kHeaderBytesAt = 12, kTotalBytesAt = 16, kFingerprintAt = 24,
                 kPositionAt = 56, kNumLayersAt = 68, kFixedHeaderBytes = 96;
constexpr uint32_t kOldestVersion = 1, kNewestVersion = 3;
constexpr int kMaxDims = 4;
// Stub header: magic, version, P, page count, reserved, page bytes, the writer's
// TenantTag (32 hex).
constexpr size_t kTagAt = 32, kTagBytes = 32;
constexpr size_t kStubHeaderBytes = 8 + 4 + 4 + 4 + 4 + 8 + kTagBytes;
constexpr size_t kDigestBytes = 32;
constexpr size_t kRecordHeaderBytes = 8 + 8 + 8;
constexpr uint64_t kMaxBytesPerToken = uint64_t{1} << 40;

template <typename T>
T Load(std::string_view bytes, size_t at) {
  T value;
  std::memcpy(&value, bytes.data() + at, sizeof value);
  return value;
}

template <typename T>
void Append(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// Snapshot dtype code 4: ggml's Q8_0 blocks along the last dimension, 34 bytes per 32
// values (the dimension a multiple of 32).
constexpr uint8_t kQ8_0Code = 4;

// Bytes per element of a snapshot dtype code (q8_0: see ValueBytes); 0 for a code no
// version defines.
int64_t ElementBytes(uint8_t dtype) {
  switch (dtype) {
    case 1:  // float32
      return 4;
    case 2:  // float16
    case 3:  // bfloat16
      return 2;
    case kQ8_0Code:
      return 1;
  }
  return 0;
}

// Bytes `numel` values take as `dtype`: for q8_0, 34 per 32 written as numel + numel / 16
// (exact for whole blocks, and never under numel, so a count clamped to "more than the
// bytes left" still runs past the end).
uint64_t ValueBytes(uint8_t dtype, uint64_t numel) {
  return dtype == kQ8_0Code ? numel + numel / 16 : numel * uint64_t(ElementBytes(dtype));
}

// One tensor of a snapshot (or of a stub's reduced snapshot) as laid out in its bytes.
struct Tensor {
  size_t values_at = 0;  // offset of its first value
  int64_t heads = 0, rows = 0, row_bytes = 0;  // paged tensors: dims[0], dims[1], dims[2]*el
  int64_t value_bytes = 0;  // in the bytes parsed
  uint8_t dtype = 0;
  bool paged = false;
};

struct Layout {
  std::string_view fingerprint;
  int64_t position = 0;
  uint64_t total_bytes = 0;
  std::vector<Tensor> tensors;
  size_t end = 0;  // where the CRC trailer starts
  int64_t bytes_per_token = 0;  // B, over the paged tensors
  std::string dtypes;  // the paged tensors' codes, in order
};

// Reads the layout of `bytes`, a whole snapshot (`kept_from` 0) or a stub's reduced one,
// whose paged tensors hold only rows [kept_from, rows) per head. `fail` makes the status.
absl::StatusOr<Layout> ParseLayout(std::string_view bytes, int64_t kept_from,
                                   absl::Status (*fail)(std::string_view)) {
  if (bytes.size() < kFixedHeaderBytes + 4 ||
      std::memcmp(bytes.data(), kSnapshotMagic, sizeof kSnapshotMagic) != 0) {
    return fail("not a snapshot (no ATTNSNAP header)");
  }
  const uint32_t version = Load<uint32_t>(bytes, kVersionAt);
  if (version < kOldestVersion || version > kNewestVersion) {
    return fail(absl::StrCat("snapshot format version ", version, " (pages read 1 to 3)"));
  }
  Layout out;
  out.total_bytes = Load<uint64_t>(bytes, kTotalBytesAt);
  out.fingerprint = bytes.substr(kFingerprintAt, 32);
  out.position = Load<int64_t>(bytes, kPositionAt);
  out.end = bytes.size() - 4;
  const uint32_t header_bytes = Load<uint32_t>(bytes, kHeaderBytesAt);
  const uint32_t num_layers = Load<uint32_t>(bytes, kNumLayersAt);
  if (out.position < 0 || header_bytes < kFixedHeaderBytes || header_bytes > out.end) {
    return fail("snapshot header out of range");
  }
  size_t at = header_bytes;
  auto need = [&](uint64_t n) { return n <= out.end - at; };
  for (uint32_t l = 0; l < num_layers; ++l) {
    if (!need(4)) return fail("layers run past the end");
    const uint32_t count = Load<uint32_t>(bytes, at);
    at += 4;
    for (uint32_t t = 0; t < count; ++t) {
      if (!need(1)) return fail("tensors run past the end");
      const uint8_t name_len = uint8_t(bytes[at]);
      if (!need(1 + uint64_t(name_len) + 3)) return fail("tensors run past the end");
      at += 1 + name_len;
      Tensor tensor;
      tensor.dtype = uint8_t(bytes[at]);
      const uint8_t ndim = uint8_t(bytes[at + 1]);
      at += 3;
      const int64_t element = ElementBytes(tensor.dtype);
      if (element == 0 || ndim > kMaxDims || !need(8 * uint64_t(ndim))) {
        return fail(absl::StrCat("layer ", l, ": a tensor of dtype ", int(tensor.dtype),
                                 " and rank ", int(ndim), " no version defines"));
      }
      int64_t dims[kMaxDims];
      uint64_t numel = 1;
      for (int d = 0; d < ndim; ++d) {
        dims[d] = Load<int64_t>(bytes, at);
        at += 8;
        // Each factor bounded by the bytes left, so the product cannot overflow before
        // the check below refuses it.
        if (dims[d] < 0 || uint64_t(dims[d]) > out.end) return fail("dimension out of range");
        numel *= uint64_t(dims[d]);
        if (numel > out.end) numel = out.end + 1;
      }
      if (tensor.dtype == kQ8_0Code && (ndim == 0 || dims[ndim - 1] % 32 != 0)) {
        return fail(absl::StrCat("layer ", l, ": q8_0 rows that are not whole blocks"));
      }
      tensor.paged = ndim == 3 && dims[1] == out.position && out.position > 0;
      tensor.values_at = at;
      if (tensor.paged) {
        tensor.heads = dims[0];
        tensor.rows = dims[1];
        tensor.row_bytes = int64_t(ValueBytes(tensor.dtype, uint64_t(dims[2])));
        if (kept_from > tensor.rows) return fail("stub keeps rows past the position");
        const unsigned __int128 kept = (unsigned __int128)tensor.heads *
                                       uint64_t(tensor.rows - kept_from) *
                                       uint64_t(tensor.row_bytes);
        if (kept > out.end) return fail("values run past the end");
        tensor.value_bytes = int64_t(kept);
        // Bounded, so that P * B never overflows (a stub whose position is a whole
        // number of pages keeps no rows to bound it by).
        const unsigned __int128 per_token =
            (unsigned __int128)tensor.heads * uint64_t(tensor.row_bytes);
        if (per_token > kMaxBytesPerToken - uint64_t(out.bytes_per_token)) {
          return fail("a paged tensor's rows are out of range");
        }
        out.bytes_per_token += int64_t(per_token);
        out.dtypes.push_back(char(tensor.dtype));
      } else {
        tensor.value_bytes = int64_t(ValueBytes(tensor.dtype, numel));
      }
      if (!need(uint64_t(tensor.value_bytes))) return fail("values run past the end");
      at += size_t(tensor.value_bytes);
      out.tensors.push_back(tensor);
    }
  }
  if (at != out.end) return fail("unexplained bytes after the last layer");
  return out;
}

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("state pages: ", std::string(what)));
}
absl::Status Damaged(std::string_view what) {
  return absl::DataLossError(absl::StrCat("stored state: ", std::string(what)));
}

int64_t PageTokens(int64_t bytes_per_token, int64_t target_bytes) {
  int64_t p = kMinPageTokens;
  while (p * 2 <= kMaxPageTokens && p * 2 * bytes_per_token <= target_bytes) p *= 2;
  return p;
}

std::string PageKeyDigest(std::string_view tenant, const Layout& layout, int64_t page_tokens,
                          std::string_view page) {
  Sha256 h;
  // Every field has a fixed size or its length first: no two inputs hash the same bytes.
  h.Update(std::string_view(kKeyDomain, sizeof kKeyDomain));
  h.Update(TenantTag(tenant));
  h.Update(layout.fingerprint);
  std::string fields;
  Append<uint64_t>(fields, uint64_t(page_tokens));
  Append<uint64_t>(fields, layout.dtypes.size());
  fields += layout.dtypes;
  Append<uint64_t>(fields, page.size());
  h.Update(fields);
  h.Update(page);
  const Sha256Digest digest = h.Finish();
  return std::string(reinterpret_cast<const char*>(digest.data()), digest.size());
}

std::string PageId(std::string_view digest) {
  Sha256Digest d;
  std::memcpy(d.data(), digest.data(), d.size());
  return "page_" + DigestHex(d);
}

}  // namespace

std::optional<uint64_t> SnapshotDeclaredBytes(std::string_view bytes) {
  if (bytes.size() < kFixedHeaderBytes ||
      std::memcmp(bytes.data(), kSnapshotMagic, sizeof kSnapshotMagic) != 0) {
    return std::nullopt;
  }
  const uint32_t version = Load<uint32_t>(bytes, kVersionAt);
  if (version < kOldestVersion || version > kNewestVersion) return std::nullopt;
  return Load<uint64_t>(bytes, kTotalBytesAt);
}

absl::StatusOr<SplitState> SplitSnapshot(std::string_view tenant, std::string_view snapshot,
                                         int64_t target_bytes) {
  absl::StatusOr<Layout> layout = ParseLayout(snapshot, 0, Invalid);
  if (!layout.ok()) return layout.status();
  if (layout->total_bytes != snapshot.size()) {
    return Invalid(absl::StrCat("the snapshot declares ", layout->total_bytes, " bytes and has ",
                                snapshot.size()));
  }
  SplitState out;
  const int64_t b = layout->bytes_per_token;
  const int64_t p = b == 0 ? 0 : PageTokens(b, target_bytes);
  const int64_t full = p == 0 ? 0 : layout->position / p;
  out.page_tokens = p;
  const int64_t page_bytes = full == 0 ? 0 : p * b;
  // The pages: per paged tensor, per head, P rows each.
  out.pages.resize(size_t(full));
  for (int64_t i = 0; i < full; ++i) out.pages[i].bytes.reserve(size_t(page_bytes));
  for (const Tensor& t : layout->tensors) {
    if (!t.paged || full == 0) continue;
    for (int64_t h = 0; h < t.heads; ++h) {
      const char* head = snapshot.data() + t.values_at + size_t(h * t.rows * t.row_bytes);
      for (int64_t i = 0; i < full; ++i) {
        out.pages[i].bytes.append(head + i * p * t.row_bytes, size_t(p * t.row_bytes));
      }
    }
  }
  // The stub: its header and page keys, then the snapshot without the pages' rows.
  std::string& stub = out.stub;
  stub.reserve(kStubHeaderBytes + size_t(full) * kDigestBytes + snapshot.size() -
               size_t(full * page_bytes));
  stub.append(kStubMagic, sizeof kStubMagic);
  Append<uint32_t>(stub, kStubVersion);
  Append<uint32_t>(stub, uint32_t(p));
  Append<uint32_t>(stub, uint32_t(full));
  Append<uint32_t>(stub, 0);
  Append<uint64_t>(stub, uint64_t(page_bytes));
  stub += TenantTag(tenant);
  for (StatePage& page : out.pages) {
    const std::string digest = PageKeyDigest(tenant, *layout, p, page.bytes);
    stub += digest;
    page.id = PageId(digest);
  }
  size_t copied = 0;  // of the snapshot
  for (const Tensor& t : layout->tensors) {
    if (!t.paged || full == 0) continue;
    stub.append(snapshot.data() + copied, t.values_at - copied);
    const int64_t skip = full * p * t.row_bytes;
    const int64_t keep = (t.rows - full * p) * t.row_bytes;
    for (int64_t h = 0; h < t.heads; ++h) {
      stub.append(snapshot.data() + t.values_at + h * t.rows * t.row_bytes + skip, size_t(keep));
    }
    copied = t.values_at + size_t(t.heads * t.rows * t.row_bytes);
  }
  stub.append(snapshot.data() + copied, snapshot.size() - copied);
  return out;
}

namespace {

struct StubHeader {
  int64_t page_tokens = 0;
  int64_t page_count = 0;
  int64_t page_bytes = 0;
  std::string_view tenant_tag;  // the writer's, as it says
  std::string_view digests;  // page_count * 32 bytes
  std::string_view reduced;  // the snapshot without its pages' rows
};

absl::StatusOr<StubHeader> ParseStub(std::string_view stub) {
  if (stub.size() < kStubHeaderBytes ||
      std::memcmp(stub.data(), kStubMagic, sizeof kStubMagic) != 0) {
    return Damaged("not a state stub");
  }
  if (Load<uint32_t>(stub, 8) != kStubVersion) {
    return Damaged(absl::StrCat("state stub version ", Load<uint32_t>(stub, 8)));
  }
  StubHeader out;
  out.page_tokens = Load<uint32_t>(stub, 12);
  out.page_count = Load<uint32_t>(stub, 16);
  const uint64_t page_bytes = Load<uint64_t>(stub, 24);
  if (uint64_t(out.page_count) > (stub.size() - kStubHeaderBytes) / kDigestBytes ||
      page_bytes > (uint64_t{1} << 40)) {
    return Damaged("state stub header out of range");
  }
  out.page_bytes = int64_t(page_bytes);
  out.tenant_tag = stub.substr(kTagAt, kTagBytes);
  out.digests = stub.substr(kStubHeaderBytes, size_t(out.page_count) * kDigestBytes);
  out.reduced = stub.substr(kStubHeaderBytes + out.digests.size());
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> StubPageIds(std::string_view stub) {
  absl::StatusOr<StubHeader> header = ParseStub(stub);
  if (!header.ok()) return header.status();
  std::vector<std::string> ids;
  ids.reserve(size_t(header->page_count));
  for (int64_t i = 0; i < header->page_count; ++i) {
    ids.push_back(PageId(header->digests.substr(size_t(i) * kDigestBytes, kDigestBytes)));
  }
  return ids;
}

bool StubIsTenants(std::string_view stub, std::string_view tenant) {
  absl::StatusOr<StubHeader> header = ParseStub(stub);
  return header.ok() && header->tenant_tag == TenantTag(tenant);
}

absl::StatusOr<std::string> JoinSnapshot(std::string_view stub,
                                         const std::vector<std::string_view>& pages,
                                         std::optional<std::string_view> verify_tenant) {
  absl::StatusOr<StubHeader> header = ParseStub(stub);
  if (!header.ok()) return header.status();
  if (verify_tenant.has_value() && header->tenant_tag != TenantTag(*verify_tenant)) {
    return absl::NotFoundError("stored state: another tenant's");
  }
  const int64_t p = header->page_tokens, full = header->page_count;
  absl::StatusOr<Layout> layout =
      ParseLayout(header->reduced, full * p, [](std::string_view what) { return Damaged(what); });
  if (!layout.ok()) return layout.status();
  // The stub's page geometry must be the one its own layout gives.
  if (full > 0 && (p <= 0 || p > kMaxPageTokens || layout->position / p != full ||
                   header->page_bytes != p * layout->bytes_per_token)) {
    return Damaged("state stub's pages do not fit its snapshot");
  }
  if (int64_t(pages.size()) != full) {
    return Damaged(absl::StrCat("state stub names ", full, " pages, ", pages.size(), " given"));
  }
  if ((unsigned __int128)layout->total_bytes !=
      header->reduced.size() + (unsigned __int128)full * uint64_t(header->page_bytes)) {
    return Damaged("state stub's size disagrees with its snapshot's");
  }
  for (int64_t i = 0; i < full; ++i) {
    const std::string_view want = header->digests.substr(size_t(i) * kDigestBytes, kDigestBytes);
    if (int64_t(pages[i].size()) != header->page_bytes) {
      return Damaged(absl::StrCat("page ", PageId(want), " has ", pages[i].size(),
                                  " bytes; its stub says ", header->page_bytes));
    }
    if (verify_tenant.has_value() &&
        PageKeyDigest(*verify_tenant, *layout, p, pages[i]) != want) {
      return Damaged(absl::StrCat("page ", PageId(want), " does not match its key"));
    }
  }
  const std::string_view reduced = header->reduced;
  std::string out;
  out.reserve(size_t(layout->total_bytes));
  size_t copied = 0;  // of the reduced snapshot
  int64_t in_page = 0;  // where the current tensor's rows start in each page
  for (const Tensor& t : layout->tensors) {
    if (!t.paged || full == 0) continue;
    out.append(reduced.data() + copied, t.values_at - copied);
    const int64_t block = p * t.row_bytes;
    const int64_t keep = (t.rows - full * p) * t.row_bytes;
    for (int64_t h = 0; h < t.heads; ++h) {
      for (int64_t i = 0; i < full; ++i) {
        out.append(pages[i].data() + in_page + h * block, size_t(block));
      }
      out.append(reduced.data() + t.values_at + h * keep, size_t(keep));
    }
    in_page += t.heads * block;
    copied = t.values_at + size_t(t.heads * keep);
  }
  out.append(reduced.data() + copied, reduced.size() - copied);
  return out;
}

bool IsPagedRecord(std::string_view bytes) {
  return bytes.size() >= sizeof kRecordMagic &&
         std::memcmp(bytes.data(), kRecordMagic, sizeof kRecordMagic) == 0;
}

std::string EncodePagedRecord(std::string_view prefix, std::string_view stub,
                              std::string_view tail) {
  std::string out;
  out.reserve(kRecordHeaderBytes + prefix.size() + stub.size() + tail.size());
  out.append(kRecordMagic, sizeof kRecordMagic);
  Append<uint64_t>(out, prefix.size());
  Append<uint64_t>(out, stub.size());
  out += prefix;
  out += stub;
  out += tail;
  return out;
}

absl::StatusOr<PagedRecordView> ParsePagedRecord(std::string_view bytes) {
  if (!IsPagedRecord(bytes) || bytes.size() < kRecordHeaderBytes) {
    return Damaged("not a paged record");
  }
  const uint64_t prefix = Load<uint64_t>(bytes, 8), stub = Load<uint64_t>(bytes, 16);
  const uint64_t room = bytes.size() - kRecordHeaderBytes;
  if (prefix > room || stub > room - prefix) return Damaged("paged record's lengths run past it");
  PagedRecordView out;
  out.prefix = bytes.substr(kRecordHeaderBytes, prefix);
  out.stub = bytes.substr(kRecordHeaderBytes + prefix, stub);
  out.tail = bytes.substr(kRecordHeaderBytes + prefix + stub);
  return out;
}

}  // namespace attnserve::store
