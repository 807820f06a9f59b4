#include "server/tools/legacy_weights.h"

#include <ATen/ATen.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "server/common/crc32.h"
#include "server/common/torch_status.h"

namespace attnserve::tools {
namespace {

constexpr char kMagic[4] = {'A', 'T', 'S', 'W'};
constexpr uint32_t kVersion = 1;
constexpr uint32_t kMaxNdim = 8;

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

// Sequential reader over the file's bytes; every read is bounds-checked.
class Reader {
 public:
  explicit Reader(std::string_view data) : data_(data) {}
  template <typename T>
  bool Get(T* value) {
    if (data_.size() - pos_ < sizeof(T)) return false;
    std::memcpy(value, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return true;
  }
  bool Bytes(size_t n, std::string_view* out) {
    if (data_.size() - pos_ < n) return false;
    *out = data_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  bool AtEnd() const { return pos_ == data_.size(); }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

}  // namespace

absl::Status WriteTensors(const std::string& path, const attention::NamedTensors& tensors) {
  return CatchTorch("writing weights", [&]() -> absl::Status {
    std::string out(kMagic, 4);
    Put<uint32_t>(out, kVersion);
    Put<uint32_t>(out, uint32_t(tensors.size()));
    for (const auto& [name, tensor] : tensors) {
      at::Tensor t = tensor.detach().to(at::kFloat).contiguous();
      Put<uint32_t>(out, uint32_t(name.size()));
      out += name;
      Put<uint32_t>(out, uint32_t(t.dim()));
      for (int64_t d : t.sizes()) Put<int64_t>(out, d);
      out.append(static_cast<const char*>(t.data_ptr()), t.nbytes());
    }
    Put<uint32_t>(out, Crc32(0, out.data(), out.size()));
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      f.write(out.data(), std::streamsize(out.size()));
      f.close();
      if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
    }
    if (std::rename(tmp.c_str(), path.c_str()) != 0) {
      return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
    }
    return absl::OkStatus();
  });
}

absl::StatusOr<attention::NamedTensors> ReadTensors(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open weights file ", path));
  const std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto corrupt = [&](const std::string& why) {
    return absl::DataLossError(absl::StrCat("weights file ", path, " is corrupt: ", why));
  };
  if (data.size() < 16 || std::memcmp(data.data(), kMagic, 4) != 0) {
    return corrupt("bad magic (not an attnserve weights file)");
  }
  uint32_t stored_crc;
  std::memcpy(&stored_crc, data.data() + data.size() - 4, 4);
  if (Crc32(0, data.data(), data.size() - 4) != stored_crc) return corrupt("checksum mismatch");
  Reader r(std::string_view(data).substr(4, data.size() - 8));
  uint32_t version, count;
  if (!r.Get(&version) || !r.Get(&count)) return corrupt("truncated header");
  if (version != kVersion) {
    return corrupt(absl::StrCat("version ", version, ", this build reads ", kVersion));
  }
  return CatchTorch("reading weights", [&]() -> absl::StatusOr<attention::NamedTensors> {
    attention::NamedTensors out;
    for (uint32_t i = 0; i < count; ++i) {
      uint32_t name_len, ndim;
      std::string_view name;
      if (!r.Get(&name_len) || !r.Bytes(name_len, &name) || !r.Get(&ndim) ||
          ndim > kMaxNdim) {
        return corrupt(absl::StrCat("bad entry ", i));
      }
      std::vector<int64_t> dims(ndim);
      int64_t numel = 1;
      for (auto& d : dims) {
        if (!r.Get(&d) || d < 0 || d > (int64_t{1} << 40)) return corrupt("bad shape");
        numel *= d;
      }
      std::string_view bytes;
      if (numel > (int64_t{1} << 34) || !r.Bytes(size_t(numel) * 4, &bytes)) {
        return corrupt(absl::StrCat("truncated data for '", std::string(name), "'"));
      }
      at::Tensor t = at::empty(dims, at::kFloat);
      std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
      out.emplace_back(std::string(name), t);
    }
    if (!r.AtEnd()) return corrupt("trailing bytes");
    return out;
  });
}

}  // namespace attnserve::tools
