#include "server/snapshot/snapshot.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "server/attention/options.h"
#include "server/common/crc32c.h"
#include "server/common/excerpt.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the snapshot codec writes host integers and floats as little-endian");

namespace attnserve::snapshot {
using catalogue::ModelCatalogue;
using catalogue::ServedModel;

namespace {

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'S', 'N', 'A', 'P'};
// Tensor element types (version 3; versions 1 and 2 hold only kFloat32). KV caches
// ("k", "v") are written in the type their server stores them; every other tensor is
// float32.
constexpr uint8_t kFloat32 = 1;
constexpr uint8_t kFloat16 = 2;
constexpr uint8_t kBFloat16 = 3;
// ggml's Q8_0 blocks along the last dimension (a multiple of 32): per 32 values an IEEE
// half scale and 32 int8, 34 bytes. In memory an at::kByte tensor whose last dimension
// is those bytes; in a snapshot its shape is the values' (the model's state shape).
constexpr uint8_t kQ8_0 = 4;
constexpr int kMaxDims = 4;

uint8_t DtypeCode(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return kFloat32;
    case at::kHalf: return kFloat16;
    case at::kBFloat16: return kBFloat16;
    case at::kByte: return kQ8_0;
    default: TORCH_CHECK(false, "snapshot: a state tensor of type ", type);
  }
}

at::ScalarType DtypeOfCode(uint8_t code) {
  switch (code) {
    case kFloat16: return at::kHalf;
    case kBFloat16: return at::kBFloat16;
    case kQ8_0: return at::kByte;
    default: return at::kFloat;
  }
}

// Bytes of one element of a float type, or of one byte of q8_0 blocks.
int64_t ElementBytes(uint8_t code) { return code == kFloat32 ? 4 : code == kQ8_0 ? 1 : 2; }

// Bytes the payload of `numel` values takes as `code` (q8_0: whole blocks, checked).
uint64_t PayloadBytes(uint8_t code, uint64_t numel) {
  if (code == kQ8_0) {
    return numel / attention::kQ8_0BlockValues * attention::kQ8_0BlockBytes;
  }
  return numel * uint64_t(ElementBytes(code));
}

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

template <typename T>
void PutAt(std::string& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof value);
}

// Appends the values (of `element` bytes each) of a (possibly strided) view in row-major
// order, copying the largest contiguous trailing block at once (a KV cache's used length
// is one block per head).
void AppendValues(std::string& out, const char* base, int64_t element, at::IntArrayRef sizes,
                  at::IntArrayRef strides, size_t dim) {
  int64_t block = 1;
  bool contiguous = true;
  for (size_t d = sizes.size(); d-- > dim;) {
    if (sizes[d] != 1 && strides[d] != block) contiguous = false;
    block *= sizes[d];
  }
  if (contiguous) {
    out.append(base, size_t(block * element));
    return;
  }
  for (int64_t i = 0; i < sizes[dim]; ++i) {
    AppendValues(out, base + i * strides[dim] * element, element, sizes, strides, dim + 1);
  }
}

// Bounds-checked little-endian reads over the verified byte range.
class Reader {
 public:
  Reader(std::string_view bytes, size_t offset) : bytes_(bytes), offset_(offset) {}
  template <typename T>
  bool Read(T* value) {
    if (bytes_.size() - offset_ < sizeof(T)) return false;
    std::memcpy(value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return true;
  }
  bool Skip(uint64_t n, std::string_view* skipped = nullptr) {
    if (bytes_.size() - offset_ < n) return false;
    if (skipped) *skipped = bytes_.substr(offset_, n);
    offset_ += n;
    return true;
  }
  size_t offset() const { return offset_; }

 private:
  std::string_view bytes_;
  size_t offset_;
};

std::string ShapeText(const std::vector<int64_t>& dims) {
  std::string out = "(";
  for (size_t i = 0; i < dims.size(); ++i) absl::StrAppend(&out, i ? ", " : "", dims[i]);
  return out + ")";
}

absl::Status Invalid(std::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("snapshot: ", std::string(what)));
}

}  // namespace

std::string EncodeSnapshot(const ServedModel& served, const model::DecodeState* state,
                           const SnapshotInfo& info) {
  const model::Model& m = *served.model;
  const std::string& module = m.config().attention.module;
  std::unique_ptr<model::DecodeState> fresh;
  if (state == nullptr) state = (fresh = m.NewState()).get();
  std::string out;
  out.reserve(kSnapshotFixedHeaderBytes + 1024 + size_t(state->Bytes()));
  out.append(kMagic, sizeof kMagic);
  Put<uint32_t>(out, kSnapshotVersion);
  Put<uint32_t>(out, 0);  // header_bytes, set below
  Put<uint64_t>(out, 0);  // total_bytes, set below
  const Sha256Digest& fingerprint = m.Fingerprint();
  out.append(reinterpret_cast<const char*>(fingerprint.data()), fingerprint.size());
  Put<int64_t>(out, state->position());
  Put<int32_t>(out, info.pending_token ? *info.pending_token : -1);
  Put<uint32_t>(out, uint32_t(state->num_layers()));
  Put<int64_t>(out, absl::ToInt64Milliseconds(info.ttl));
  Put<uint16_t>(out, uint16_t(served.name.size()));
  Put<uint16_t>(out, uint16_t(module.size()));
  Put<uint32_t>(out, uint32_t(m.config().attention.order));
  Put<uint32_t>(out, 0);  // sampler_bytes: each turn seeds its own sampler
  const size_t owner_bytes = std::min(info.owner.size(), kMaxSnapshotOwnerBytes);
  Put<uint32_t>(out, uint32_t(owner_bytes));  // version 1: reserved, 0
  out += served.name;
  out += module;
  out.append(info.owner, 0, owner_bytes);
  PutAt<uint32_t>(out, 12, uint32_t(out.size()));
  for (int l = 0; l < state->num_layers(); ++l) {
    const attention::NamedTensors tensors = state->layer(l).Tensors();
    Put<uint32_t>(out, uint32_t(tensors.size()));
    for (const auto& [name, t] : tensors) {
      Put<uint8_t>(out, uint8_t(name.size()));
      out += name;
      const uint8_t dtype = DtypeCode(t.scalar_type());
      Put<uint8_t>(out, dtype);
      Put<uint8_t>(out, uint8_t(t.dim()));
      Put<uint8_t>(out, 0);
      for (int64_t i = 0; i < t.dim(); ++i) {
        // q8_0: the values' shape, not the blocks' bytes.
        const bool blocks = dtype == kQ8_0 && i == t.dim() - 1;
        Put<int64_t>(out, blocks ? t.size(i) / attention::kQ8_0BlockBytes *
                                       attention::kQ8_0BlockValues
                                 : t.size(i));
      }
      if (t.numel() > 0) {
        AppendValues(out, static_cast<const char*>(t.data_ptr()), ElementBytes(dtype), t.sizes(),
                     t.strides(), 0);
      }
    }
  }
  PutAt<uint64_t>(out, 16, uint64_t(out.size() + 4));
  Put<uint32_t>(out, Crc32c(0, out.data(), out.size()));
  return out;
}

absl::StatusOr<uint64_t> SnapshotTotalBytes(std::string_view prefix, uint64_t max_bytes) {
  if (prefix.size() < sizeof kMagic || std::memcmp(prefix.data(), kMagic, sizeof kMagic) != 0) {
    return Invalid("not an attnserve session snapshot (it does not start with ATTNSNAP)");
  }
  if (prefix.size() < kSnapshotFixedHeaderBytes) {
    return absl::DataLossError(absl::StrCat("snapshot: truncated header: ", prefix.size(),
                                            " bytes; the fixed header alone is ",
                                            kSnapshotFixedHeaderBytes));
  }
  Reader r(prefix, sizeof kMagic);
  uint32_t version = 0, header_bytes = 0;
  uint64_t total = 0;
  r.Read(&version);
  r.Read(&header_bytes);
  r.Read(&total);
  if (version < kOldestSnapshotVersion || version > kSnapshotVersion) {
    return Invalid(absl::StrCat("format version ", version, " is not supported; this server "
                                "reads versions ", kOldestSnapshotVersion, " to ",
                                kSnapshotVersion));
  }
  if (total > max_bytes) {
    return Invalid(absl::StrCat("declares ", total, " bytes, over this server's limit of ",
                                max_bytes, " (the largest state it serves plus headers)"));
  }
  if (total < kSnapshotFixedHeaderBytes + 4 || header_bytes < kSnapshotFixedHeaderBytes ||
      header_bytes > total - 4) {
    return Invalid(absl::StrCat("declared sizes are inconsistent: header ", header_bytes,
                                " bytes, total ", total));
  }
  return total;
}

absl::StatusOr<std::string> SnapshotOwner(std::string_view bytes) {
  auto total = SnapshotTotalBytes(bytes, std::numeric_limits<uint64_t>::max());
  if (!total.ok()) return total.status();
  uint32_t version, header_bytes, sampler_bytes, owner_bytes;
  uint16_t name_bytes = 0, module_bytes = 0;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&header_bytes, bytes.data() + 12, 4);
  std::memcpy(&name_bytes, bytes.data() + 80, 2);
  std::memcpy(&module_bytes, bytes.data() + 82, 2);
  std::memcpy(&sampler_bytes, bytes.data() + 88, 4);
  std::memcpy(&owner_bytes, bytes.data() + 92, 4);
  if (version == 1) return std::string(kDefaultTenant);
  const uint64_t at = uint64_t(kSnapshotFixedHeaderBytes) + name_bytes + module_bytes +
                      sampler_bytes;
  if (owner_bytes > kMaxSnapshotOwnerBytes || at + owner_bytes != header_bytes ||
      header_bytes > bytes.size()) {
    return Invalid(absl::StrCat("header fields disagree with header_bytes ", header_bytes));
  }
  if (owner_bytes == 0) return std::string(kDefaultTenant);
  return std::string(bytes.substr(at, owner_bytes));
}

absl::StatusOr<VerifiedSnapshot> VerifySnapshot(SnapshotBytes owned,
                                                const ModelCatalogue& catalogue,
                                                uint64_t max_bytes) {
  const std::string_view bytes = owned.view();
  auto total = SnapshotTotalBytes(bytes, max_bytes);
  if (!total.ok()) return total.status();
  if (bytes.size() < *total) {
    return absl::DataLossError(absl::StrCat("snapshot: truncated: ", bytes.size(), " of the ",
                                            *total, " bytes it declares"));
  }
  if (bytes.size() > *total) {
    return absl::DataLossError(absl::StrCat("snapshot: ", bytes.size() - *total,
                                            " bytes after the end it declares (", *total,
                                            " bytes)"));
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, bytes.data() + *total - 4, 4);
  if (const uint32_t crc = Crc32c(0, bytes.data(), *total - 4); crc != stored_crc) {
    return absl::DataLossError(absl::StrCat(
        "snapshot: checksum mismatch (CRC-32C ", absl::Hex(crc, absl::kZeroPad8), ", stored ",
        absl::Hex(stored_crc, absl::kZeroPad8), "): the bytes were damaged"));
  }
  const std::string_view body = bytes.substr(0, *total - 4);
  uint32_t version;
  std::memcpy(&version, body.data() + 8, 4);
  Reader r(body, 12);
  uint32_t header_bytes = 0, num_layers = 0, order = 0, sampler_bytes = 0, owner_bytes = 0;
  uint64_t total_field;
  Sha256Digest fingerprint;
  int64_t position = 0, ttl_ms = 0;
  int32_t pending = 0;
  uint16_t name_bytes = 0, module_bytes = 0;
  r.Read(&header_bytes);
  r.Read(&total_field);
  r.Read(&fingerprint);
  r.Read(&position);
  r.Read(&pending);
  r.Read(&num_layers);
  r.Read(&ttl_ms);
  r.Read(&name_bytes);
  r.Read(&module_bytes);
  r.Read(&order);
  r.Read(&sampler_bytes);
  r.Read(&owner_bytes);
  if (version == 1) owner_bytes = 0;  // reserved in version 1: no owner
  if (owner_bytes > kMaxSnapshotOwnerBytes) {
    return Invalid(absl::StrCat("owner of ", owner_bytes, " bytes is over the limit of ",
                                kMaxSnapshotOwnerBytes));
  }
  std::string_view name, module, sampler, owner;
  if (!r.Skip(name_bytes, &name) || !r.Skip(module_bytes, &module) ||
      !r.Skip(sampler_bytes, &sampler) || !r.Skip(owner_bytes, &owner) ||
      r.offset() != header_bytes) {
    return Invalid(absl::StrCat("header fields disagree with header_bytes ", header_bytes));
  }
  VerifiedSnapshot out;
  out.model = catalogue.FindByFingerprint(fingerprint);
  if (out.model == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "snapshot: of model '", Excerpt(name), "' served as ", Excerpt(module), " order ", order,
        " (fingerprint ", DigestHex(fingerprint, 6),
        "), which this server does not serve with these weights and options"));
  }
  const model::Model& m = *out.model->model;
  if (sampler_bytes != 0) {
    return Invalid(absl::StrCat("carries sampler state, which version ", version, " does not"));
  }
  if (position < 0 || position > m.config().max_context) {
    return Invalid(absl::StrCat("position ", position, " is outside [0, ",
                                m.config().max_context, "] of model '", out.model->name, "'"));
  }
  if (pending < -1 || pending >= m.config().vocab_size) {
    return Invalid(absl::StrCat("pending token ", pending, " is outside the vocabulary"));
  }
  if (int64_t(num_layers) != m.config().num_layers) {
    return Invalid(absl::StrCat("has ", num_layers, " layers; model '", out.model->name,
                                "' has ", m.config().num_layers));
  }
  if (ttl_ms < 0) return Invalid(absl::StrCat("ttl ", ttl_ms, " ms is negative"));
  for (uint32_t l = 0; l < num_layers; ++l) {
    // Each layer's own tensors: a hybrid's recurrent layers hold "conv" (and "ssm"), its
    // attention layers their module's.
    const attention::TensorShapes shapes = m.StateShapes(int(l), position);
    const std::string where = absl::StrCat("layer ", l);
    uint32_t count = 0;
    if (!r.Read(&count) || count != shapes.size()) {
      return Invalid(absl::StrCat(where, ": ", count, " tensors; the model's state has ",
                                  shapes.size()));
    }
    out.payload_offsets.emplace_back();
    for (const auto& [want_name, want_dims] : shapes) {
      uint8_t name_len, dtype, ndim, pad;
      std::string_view got_name;
      if (!r.Read(&name_len) || !r.Skip(name_len, &got_name) || got_name != want_name) {
        return Invalid(absl::StrCat(where, ": expected tensor '", want_name, "'"));
      }
      if (!r.Read(&dtype) || !r.Read(&ndim) || !r.Read(&pad) || ndim > kMaxDims) {
        return Invalid(absl::StrCat(where, " tensor '", want_name,
                                    "': its header runs past the end or has over 4 dims"));
      }
      // 16-bit elements and q8_0 blocks in version 3, and only in a KV cache.
      const bool kv = want_name == "k" || want_name == "v";
      const bool dtype_ok =
          dtype == kFloat32 ||
          (version >= 3 && kv && (dtype == kFloat16 || dtype == kBFloat16 || dtype == kQ8_0));
      if (!dtype_ok) {
        return Invalid(absl::StrCat(where, " tensor '", want_name, "': element type ", dtype,
                                    " is not ",
                                    kv && version >= 3 ? "float32, float16, bfloat16 or q8_0"
                                                       : "float32"));
      }
      std::vector<int64_t> dims(ndim);
      for (auto& d : dims) {
        if (!r.Read(&d)) return Invalid(absl::StrCat(where, ": dimensions run past the end"));
      }
      if (dims != want_dims) {
        return Invalid(absl::StrCat(where, " tensor '", want_name, "' has shape ",
                                    ShapeText(dims), "; model '", out.model->name,
                                    "' at position ", position, " needs ",
                                    ShapeText(want_dims)));
      }
      if (dtype == kQ8_0 && (dims.empty() || dims.back() % attention::kQ8_0BlockValues != 0)) {
        return Invalid(absl::StrCat(where, " tensor '", want_name, "': q8_0 rows of ",
                                    dims.empty() ? 0 : dims.back(),
                                    " values are not whole blocks of 32"));
      }
      int64_t numel = 1;
      for (int64_t d : dims) numel *= d;
      out.payload_offsets.back().push_back(r.offset());
      out.payload_types.push_back(DtypeOfCode(dtype));
      if (!r.Skip(PayloadBytes(dtype, uint64_t(numel)))) {
        return Invalid(absl::StrCat(where, " tensor '", want_name, "': values run past the end"));
      }
      out.state_bytes += int64_t(PayloadBytes(dtype, uint64_t(numel)));
    }
  }
  if (r.offset() != body.size()) {
    return Invalid(absl::StrCat(body.size() - r.offset(), " unexplained bytes after the last layer"));
  }
  out.info.position = position;
  if (pending >= 0) out.info.pending_token = pending;
  out.info.ttl = absl::Milliseconds(ttl_ms);
  out.info.owner = owner.empty() ? std::string(kDefaultTenant) : std::string(owner);
  out.bytes = std::move(owned);
  return out;
}

absl::StatusOr<std::unique_ptr<model::DecodeState>> RestoreSnapshotState(
    const VerifiedSnapshot& snapshot) {
  const model::Model& m = *snapshot.model->model;
  std::vector<attention::NamedTensors> layers;
  size_t tensor_index = 0;
  for (const auto& offsets : snapshot.payload_offsets) {
    const attention::TensorShapes shapes =
        m.StateShapes(int(layers.size()), snapshot.info.position);
    attention::NamedTensors tensors;
    for (size_t i = 0; i < shapes.size(); ++i) {
      // Payloads are not aligned: copy them into fresh tensors rather than wrap them.
      // An empty tensor (a KV cache at position 0) has no data pointer: memcpy must not
      // see it (UBSan, found by tests/fuzz/snapshot_fuzz).
      const at::ScalarType type = snapshot.payload_types[tensor_index++];
      std::vector<int64_t> sizes = shapes[i].second;
      if (type == at::kByte) {  // q8_0: the last dimension in block bytes
        sizes.back() = sizes.back() / attention::kQ8_0BlockValues * attention::kQ8_0BlockBytes;
      }
      at::Tensor t = at::empty(sizes, type);
      if (t.numel() > 0) {
        std::memcpy(t.data_ptr(), snapshot.bytes.view().data() + offsets[i], t.nbytes());
      }
      tensors.emplace_back(shapes[i].first, std::move(t));
    }
    layers.push_back(std::move(tensors));
  }
  return m.RestoreState(snapshot.info.position, layers);
}

}  // namespace attnserve::snapshot
