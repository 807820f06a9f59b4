#include "server/model/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "server/model/safetensors.h"

namespace attnserve::model {
namespace {

using nlohmann::json;

enum ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32Value = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};
constexpr int kMaxDims = 4;            // GGML_MAX_DIMS
constexpr uint64_t kMaxAlignment = 1 << 20;
constexpr int kQ8Block = 32;           // values per Q8_0 block
constexpr int kQ8BlockBytes = 2 + 32;  // fp16 scale + 32 int8

// The bytes one block of `type` holds and the values it decodes to; false if unknown.
bool BlockLayout(uint32_t type, int64_t* block_values, int64_t* block_bytes) {
  switch (GgmlType(type)) {
    case GgmlType::kF32: *block_values = 1; *block_bytes = 4; return true;
    case GgmlType::kF16:
    case GgmlType::kBF16: *block_values = 1; *block_bytes = 2; return true;
    case GgmlType::kQ4_0: *block_values = 32; *block_bytes = 18; return true;
    case GgmlType::kQ4_1: *block_values = 32; *block_bytes = 20; return true;
    case GgmlType::kQ5_0: *block_values = 32; *block_bytes = 22; return true;
    case GgmlType::kQ5_1: *block_values = 32; *block_bytes = 24; return true;
    case GgmlType::kQ8_0: *block_values = kQ8Block; *block_bytes = kQ8BlockBytes; return true;
    case GgmlType::kQ8_1: *block_values = 32; *block_bytes = 36; return true;
    case GgmlType::kQ2_K: *block_values = 256; *block_bytes = 84; return true;
    case GgmlType::kQ3_K: *block_values = 256; *block_bytes = 110; return true;
    case GgmlType::kQ4_K: *block_values = 256; *block_bytes = 144; return true;
    case GgmlType::kQ5_K: *block_values = 256; *block_bytes = 176; return true;
    case GgmlType::kQ6_K: *block_values = 256; *block_bytes = 210; return true;
    case GgmlType::kQ8_K: *block_values = 256; *block_bytes = 292; return true;
  }
  return false;
}

absl::Status Bad(const std::string& what) {
  return absl::DataLossError(absl::StrCat("gguf: ", what));
}

// A cursor over the file's bytes; every read checks what is left first.
class Cursor {
 public:
  explicit Cursor(std::string_view bytes) : bytes_(bytes) {}
  size_t offset() const { return at_; }
  size_t left() const { return bytes_.size() - at_; }

  template <typename T>
  bool Read(T* out) {
    if (left() < sizeof(T)) return false;
    std::memcpy(out, bytes_.data() + at_, sizeof(T));  // little-endian hosts
    at_ += sizeof(T);
    return true;
  }
  bool ReadString(std::string* out) {
    uint64_t n;
    if (!Read(&n) || n > left()) return false;
    out->assign(bytes_.data() + at_, n);
    at_ += n;
    return true;
  }

 private:
  std::string_view bytes_;
  size_t at_ = 0;
};

// The smallest encoding of one value of `type` (bounds array counts before allocating).
uint64_t MinValueBytes(uint32_t type) {
  switch (type) {
    case kU8: case kI8: case kBool: return 1;
    case kU16: case kI16: return 2;
    case kU32: case kI32: case kF32Value: return 4;
    case kU64: case kI64: case kF64: case kString: return 8;
    case kArray: return 12;
  }
  return 0;
}

absl::Status ReadValue(Cursor& c, uint32_t type, const std::string& key, int depth, json* out) {
  auto truncated = [&] { return Bad(absl::StrCat("metadata '", key, "' is cut short")); };
  switch (type) {
#define ATTNSERVE_GGUF_SCALAR(TAG, CTYPE)          \
  case TAG: {                                       \
    CTYPE v;                                        \
    if (!c.Read(&v)) return truncated();            \
    *out = v;                                       \
    return absl::OkStatus();                        \
  }
    ATTNSERVE_GGUF_SCALAR(kU8, uint8_t)
    ATTNSERVE_GGUF_SCALAR(kI8, int8_t)
    ATTNSERVE_GGUF_SCALAR(kU16, uint16_t)
    ATTNSERVE_GGUF_SCALAR(kI16, int16_t)
    ATTNSERVE_GGUF_SCALAR(kU32, uint32_t)
    ATTNSERVE_GGUF_SCALAR(kI32, int32_t)
    ATTNSERVE_GGUF_SCALAR(kF32Value, float)
    ATTNSERVE_GGUF_SCALAR(kU64, uint64_t)
    ATTNSERVE_GGUF_SCALAR(kI64, int64_t)
    ATTNSERVE_GGUF_SCALAR(kF64, double)
#undef ATTNSERVE_GGUF_SCALAR
    case kBool: {
      uint8_t v;
      if (!c.Read(&v)) return truncated();
      if (v > 1) return Bad(absl::StrCat("metadata '", key, "': bool ", int(v)));
      *out = v == 1;
      return absl::OkStatus();
    }
    case kString: {
      std::string s;
      if (!c.ReadString(&s)) return truncated();
      *out = std::move(s);
      return absl::OkStatus();
    }
    case kArray: {
      if (depth > 0) return Bad(absl::StrCat("metadata '", key, "': an array of arrays"));
      uint32_t element;
      uint64_t n;
      if (!c.Read(&element) || !c.Read(&n)) return truncated();
      const uint64_t min = MinValueBytes(element);
      if (min == 0) return Bad(absl::StrCat("metadata '", key, "': element type ", element));
      if (n > c.left() / min) return truncated();
      *out = json::array();
      out->get_ref<json::array_t&>().reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        json v;
        if (absl::Status s = ReadValue(c, element, key, depth + 1, &v); !s.ok()) return s;
        out->push_back(std::move(v));
      }
      return absl::OkStatus();
    }
  }
  return Bad(absl::StrCat("metadata '", key, "': value type ", type));
}

}  // namespace

std::string GgufValueText(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

std::string GgmlTypeName(uint32_t type) {
  switch (GgmlType(type)) {
    case GgmlType::kF32: return "F32";
    case GgmlType::kF16: return "F16";
    case GgmlType::kBF16: return "BF16";
    case GgmlType::kQ4_0: return "Q4_0";
    case GgmlType::kQ4_1: return "Q4_1";
    case GgmlType::kQ5_0: return "Q5_0";
    case GgmlType::kQ5_1: return "Q5_1";
    case GgmlType::kQ8_0: return "Q8_0";
    case GgmlType::kQ8_1: return "Q8_1";
    case GgmlType::kQ2_K: return "Q2_K";
    case GgmlType::kQ3_K: return "Q3_K";
    case GgmlType::kQ4_K: return "Q4_K";
    case GgmlType::kQ5_K: return "Q5_K";
    case GgmlType::kQ6_K: return "Q6_K";
    case GgmlType::kQ8_K: return "Q8_K";
  }
  return absl::StrCat("type ", type);
}

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::vector<int64_t> GgufTensor::shape() const { return {dims.rbegin(), dims.rend()}; }

const GgufTensor* GgufFile::Find(const std::string& name) const {
  auto it = by_name.find(name);
  return it == by_name.end() ? nullptr : &tensors[it->second];
}

absl::StatusOr<GgufFile> ParseGguf(std::string_view bytes) {
  Cursor c(bytes);
  GgufFile f;
  char magic[4];
  if (!c.Read(&magic) || std::memcmp(magic, "GGUF", 4) != 0) {
    return Bad("not a GGUF file (no \"GGUF\" magic)");
  }
  uint64_t tensor_count, kv_count;
  if (!c.Read(&f.version) || !c.Read(&tensor_count) || !c.Read(&kv_count)) {
    return Bad("the header is cut short");
  }
  if (f.version != 2 && f.version != 3) {
    return Bad(absl::StrCat("version ", f.version, " (attnserve reads versions 2 and 3)"));
  }
  // A key/value pair takes at least 12 bytes, a tensor info at least 24.
  if (kv_count > c.left() / 12) return Bad(absl::StrCat(kv_count, " metadata pairs cannot fit"));
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string key;
    uint32_t type;
    if (!c.ReadString(&key) || !c.Read(&type)) return Bad(absl::StrCat("metadata pair ", i, " is cut short"));
    if (f.metadata.contains(key)) return Bad(absl::StrCat("metadata '", key, "' appears twice"));
    json value;
    if (absl::Status s = ReadValue(c, type, key, 0, &value); !s.ok()) return s;
    f.metadata[key] = std::move(value);
  }
  if (f.metadata.contains("general.alignment")) {
    const json& a = f.metadata["general.alignment"];
    if (!a.is_number_unsigned() || a.get<uint64_t>() == 0 || a.get<uint64_t>() > kMaxAlignment ||
        (a.get<uint64_t>() & (a.get<uint64_t>() - 1)) != 0) {
      return Bad(absl::StrCat("general.alignment ", GgufValueText(a), " is not a power of two up to 1 MiB"));
    }
    f.alignment = a.get<uint64_t>();
  }
  if (tensor_count > c.left() / 24) return Bad(absl::StrCat(tensor_count, " tensors cannot fit"));
  struct Info {
    uint64_t offset;
    uint64_t size;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensor t;
    uint32_t n_dims;
    if (!c.ReadString(&t.name) || !c.Read(&n_dims)) return Bad(absl::StrCat("tensor info ", i, " is cut short"));
    if (n_dims == 0 || n_dims > kMaxDims) {
      return Bad(absl::StrCat("tensor '", t.name, "' has ", n_dims, " dimensions (1 to 4)"));
    }
    uint64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      uint64_t dim;
      if (!c.Read(&dim)) return Bad(absl::StrCat("tensor '", t.name, "' is cut short"));
      if (dim == 0 || dim > (uint64_t{1} << 40) || elements > (uint64_t{1} << 40) / dim) {
        return Bad(absl::StrCat("tensor '", t.name, "': dimension ", dim, " out of range"));
      }
      elements *= dim;
      t.dims.push_back(int64_t(dim));
    }
    uint64_t offset;
    if (!c.Read(&t.type) || !c.Read(&offset)) return Bad(absl::StrCat("tensor '", t.name, "' is cut short"));
    int64_t block_values, block_bytes;
    if (!BlockLayout(t.type, &block_values, &block_bytes)) {
      return Bad(absl::StrCat("tensor '", t.name, "' has ggml type ", t.type,
                              ", which attnserve does not know the layout of"));
    }
    if (t.dims[0] % block_values != 0) {
      return Bad(absl::StrCat("tensor '", t.name, "': its rows of ", t.dims[0], " are not whole ",
                              GgmlTypeName(t.type), " blocks of ", block_values));
    }
    if (offset % f.alignment != 0) {
      return Bad(absl::StrCat("tensor '", t.name, "': offset ", offset, " is not aligned to ",
                              f.alignment));
    }
    if (f.by_name.count(t.name) > 0) return Bad(absl::StrCat("tensor '", t.name, "' appears twice"));
    f.by_name[t.name] = f.tensors.size();
    infos.push_back({offset, elements / uint64_t(block_values) * uint64_t(block_bytes)});
    f.tensors.push_back(std::move(t));
  }
  const uint64_t data = (c.offset() + f.alignment - 1) / f.alignment * f.alignment;
  if (data > bytes.size()) return Bad("the data section starts past the end of the file");
  const uint64_t data_size = bytes.size() - data;
  for (size_t i = 0; i < f.tensors.size(); ++i) {
    const Info& info = infos[i];
    if (info.offset > data_size || info.size > data_size - info.offset) {
      return Bad(absl::StrCat("tensor '", f.tensors[i].name, "' (", info.size, " bytes at ",
                              info.offset, ") runs past the end of the file (", data_size,
                              " bytes of data)"));
    }
    f.tensors[i].bytes = bytes.substr(data + info.offset, info.size);
  }
  return f;
}

absl::StatusOr<weights::WeightType> GgufWeightType(const GgufTensor& t) {
  std::optional<weights::WeightType> type = weights::FromGgmlType(t.type);
  if (!type.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor '", t.name, "' is ", GgmlTypeName(t.type),
        "; attnserve reads GGUF tensors of type F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and "
        "Q6_K"));
  }
  return *type;
}

absl::StatusOr<std::vector<float>> GgufToFloat32(const GgufTensor& t) {
  auto type = GgufWeightType(t);
  if (!type.ok()) return type.status();
  // Rows are whole blocks (checked when the file was parsed): one call over all of them.
  std::vector<float> out(size_t(t.elements()), 0.0f);
  weights::DequantizeRow(*type, reinterpret_cast<const uint8_t*>(t.bytes.data()), out.data(),
                         t.elements());
  return out;
}

void GgufReader::Release(std::string_view bytes) const {
  const uintptr_t base = reinterpret_cast<uintptr_t>(data_);
  const uintptr_t begin = reinterpret_cast<uintptr_t>(bytes.data());
  if (data_ == nullptr || begin < base || begin + bytes.size() > base + size_) return;
  const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (begin + page - 1) / page * page;
  const uintptr_t last = (begin + bytes.size()) / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

GgufReader::~GgufReader() {
  if (data_ != nullptr) munmap(data_, size_);
}

absl::StatusOr<std::unique_ptr<GgufReader>> GgufReader::Open(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT
               ? absl::NotFoundError(absl::StrCat("cannot open ", path))
               : absl::InvalidArgumentError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  std::unique_ptr<GgufReader> r(new GgufReader);
  r->path_ = path;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a regular file"));
  }
  r->size_ = size_t(st.st_size);
  if (r->size_ > 0) {
    void* data = mmap(nullptr, r->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      close(fd);
      return absl::InternalError(absl::StrCat("cannot map ", path, ": ", strerror(errno)));
    }
    r->data_ = data;
  }
  close(fd);
  auto file = ParseGguf(std::string_view(static_cast<const char*>(r->data_), r->size_));
  if (!file.ok()) return absl::DataLossError(absl::StrCat(path, ": ", file.status().message()));
  r->file_ = *std::move(file);
  return r;
}

}  // namespace attnserve::model
