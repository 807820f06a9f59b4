#include "server/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace attnserve::model {
namespace {

using Json = nlohmann::json;

// Bytes per element of the dtypes the reference reader knows; 0: unknown.
size_t DtypeSize(const std::string& dtype) {
  static const std::map<std::string, size_t> kSizes = {
      {"BOOL", 1}, {"U8", 1},      {"I8", 1},       {"F8_E5M2", 1}, {"F8_E4M3", 1},
      {"I16", 2},  {"U16", 2},     {"F16", 2},      {"BF16", 2},    {"I32", 4},
      {"U32", 4},  {"F32", 4},     {"I64", 8},      {"U64", 8},     {"F64", 8}};
  auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

// `v` as JSON, cut to 80 characters for a message.
std::string Brief(const Json& v) {
  std::string s = v.dump();
  return s.size() <= 80 ? s : s.substr(0, 77) + "...";
}

absl::Status Corrupt(const std::string& why) {
  return absl::DataLossError(absl::StrCat("safetensors: ", why));
}

// One header entry, checked for its own fields; `begin`, `end` relative to the buffer.
struct RawEntry {
  SafetensorsEntry entry;
  uint64_t begin = 0, end = 0;
};

absl::StatusOr<RawEntry> ParseEntry(const std::string& name, const Json& info) {
  auto bad = [&](const std::string& why) {
    return Corrupt(absl::StrCat("tensor '", name, "': ", why));
  };
  if (!info.is_object()) return bad("header entry is not an object");
  for (const auto& [key, value] : info.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      return bad(absl::StrCat("unknown field '", key, "'"));
    }
  }
  RawEntry r;
  r.entry.name = name;
  const auto dtype = info.find("dtype");
  if (dtype == info.end() || !dtype->is_string()) return bad("dtype is missing or not a string");
  r.entry.dtype = dtype->get<std::string>();
  const size_t size = DtypeSize(r.entry.dtype);
  if (size == 0) return bad(absl::StrCat("unknown dtype '", r.entry.dtype, "'"));
  const auto shape = info.find("shape");
  if (shape == info.end() || !shape->is_array()) return bad("shape is missing or not a list");
  uint64_t numel = 1;
  for (const Json& d : *shape) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 40)) {
      return bad(absl::StrCat("shape ", Brief(*shape), " is not a list of sizes"));
    }
    const uint64_t n = d.get<uint64_t>();
    if (n != 0 && numel > (uint64_t{1} << 50) / n) return bad("shape overflows");
    numel *= n;
    r.entry.shape.push_back(int64_t(n));
  }
  const auto offsets = info.find("data_offsets");
  if (offsets == info.end() || !offsets->is_array() || offsets->size() != 2 ||
      !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
    return bad("data_offsets is not [begin, end]");
  }
  r.begin = (*offsets)[0].get<uint64_t>();
  r.end = (*offsets)[1].get<uint64_t>();
  if (r.end < r.begin) return bad("data_offsets end before begin");
  if (r.end - r.begin != numel * size) {
    return bad(absl::StrCat("data_offsets span ", r.end - r.begin, " bytes but shape ",
                            Brief(*shape), " of ", r.entry.dtype, " needs ", numel * size));
  }
  return r;
}

// The header's JSON; DataLoss for invalid JSON or a name twice.
absl::StatusOr<Json> ParseHeaderJson(std::string_view text) {
  std::set<std::string> names;
  std::string duplicate;
  Json::parser_callback_t cb = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::key && depth == 1 &&
        !names.insert(parsed.get<std::string>()).second && duplicate.empty()) {
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  Json header;
  try {
    header = Json::parse(text.begin(), text.end(), cb);
  } catch (const Json::exception& e) {
    return Corrupt(absl::StrCat("header is not valid JSON: ", e.what()));
  }
  if (!duplicate.empty()) return Corrupt(absl::StrCat("tensor '", duplicate, "' appears twice"));
  if (!header.is_object()) return Corrupt("header is not a JSON object");
  return header;
}

uint64_t ReadU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

}  // namespace

absl::StatusOr<SafetensorsFile> ParseSafetensors(std::string_view bytes) {
  if (bytes.size() < 8) return Corrupt("file is shorter than its 8-byte header length");
  const uint64_t n = ReadU64(bytes.data());
  if (n > kMaxSafetensorsHeader) {
    return Corrupt(absl::StrCat("header of ", n, " bytes is larger than the limit of ",
                                kMaxSafetensorsHeader));
  }
  if (n > bytes.size() - 8) {
    return Corrupt(absl::StrCat("header of ", n, " bytes runs past the end of the file (",
                                bytes.size(), " bytes)"));
  }
  auto header = ParseHeaderJson(bytes.substr(8, n));
  if (!header.ok()) return header.status();
  SafetensorsFile file;
  std::vector<RawEntry> entries;
  for (const auto& [name, info] : header->items()) {
    if (name == "__metadata__") {
      if (!info.is_object()) return Corrupt("__metadata__ is not an object");
      for (const auto& [key, value] : info.items()) {
        if (!value.is_string()) {
          return Corrupt(absl::StrCat("__metadata__ value '", key, "' is not a string"));
        }
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    auto entry = ParseEntry(name, info);
    if (!entry.ok()) return entry.status();
    entries.push_back(std::move(entry).value());
  }
  // Buffer order; then each tensor must start where the previous one ended.
  std::stable_sort(entries.begin(), entries.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const std::string_view buffer = bytes.substr(8 + n);
  uint64_t at = 0;
  for (RawEntry& r : entries) {
    if (r.begin != at) {
      return Corrupt(absl::StrCat("tensor '", r.entry.name, "': data_offsets begin at ",
                                  r.begin, ", expected ", at,
                                  " (offsets must be contiguous from 0)"));
    }
    if (r.end > buffer.size()) {
      return Corrupt(absl::StrCat("tensor '", r.entry.name, "': data_offsets end at ", r.end,
                                  " past the buffer of ", buffer.size(), " bytes"));
    }
    r.entry.bytes = buffer.substr(r.begin, r.end - r.begin);
    at = r.end;
    file.tensors.push_back(std::move(r.entry));
  }
  if (at != buffer.size()) {
    return Corrupt(absl::StrCat(buffer.size() - at, " bytes after the last tensor"));
  }
  return file;
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // zero
  } else {
    // Subnormal: mant * 2^-24, normalised for fp32.
    int e = -1;
    uint32_t m = mant;
    do {
      ++e;
      m <<= 1;
    } while ((m & 0x400) == 0);
    bits = sign | (uint32_t(112 - e) << 23) | ((m & 0x3ff) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float Bf16ToFloat(uint16_t b) {
  const uint32_t bits = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return uint16_t((bits >> 16) | 0x40);  // quiet nan
  bits += 0x7fff + ((bits >> 16) & 1);  // round to nearest even
  return uint16_t(bits >> 16);
}

uint16_t FloatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = uint16_t((bits >> 16) & 0x8000);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00;   // nan
  if (abs >= 0x477ff000u) return sign | 0x7c00;  // rounds past 65504: inf
  if (abs < 0x38800000u) {                       // below 2^-14: subnormal or zero
    if (abs < 0x33000000u) return sign;          // below half the smallest subnormal
    const uint32_t exp = abs >> 23, mant = (abs & 0x7fffff) | 0x800000;
    const uint32_t shift = 126 - exp;            // mant * 2^(exp-150) in units of 2^-24
    uint32_t h = mant >> shift;
    const uint32_t rest = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (h & 1))) ++h;
    return sign | uint16_t(h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rest = abs & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) ++h;  // may carry into the exponent
  return sign | uint16_t(h);
}

absl::StatusOr<std::vector<float>> ToFloat32(const SafetensorsEntry& e) {
  std::vector<float> out;
  const char* p = e.bytes.data();
  if (e.dtype == "F32") {
    out.resize(e.bytes.size() / 4);
    if (!out.empty()) std::memcpy(out.data(), p, e.bytes.size());  // little-endian hosts
    return out;
  }
  if (e.dtype != "F16" && e.dtype != "BF16") {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", e.name, "' has dtype ", e.dtype,
                                                   "; attnserve reads F32, F16 and BF16"));
  }
  const bool half = e.dtype == "F16";
  out.resize(e.bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const uint16_t v = uint16_t(uint8_t(p[2 * i]) | (uint8_t(p[2 * i + 1]) << 8));
    out[i] = half ? HalfToFloat(v) : Bf16ToFloat(v);
  }
  return out;
}

SafetensorsReader::~SafetensorsReader() {
  for (const Mapping& m : mappings_) munmap(m.data, m.size);
}

absl::Status SafetensorsReader::Add(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return errno == ENOENT
               ? absl::NotFoundError(absl::StrCat("cannot open ", path))
               : absl::InternalError(absl::StrCat("cannot open ", path, ": ", strerror(errno)));
  }
  struct stat st;
  if (fstat(fd, &st) != 0) {
    close(fd);
    return absl::InternalError(absl::StrCat("cannot stat ", path));
  }
  const size_t size = size_t(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    data = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (data == MAP_FAILED) {
      close(fd);
      return absl::InternalError(absl::StrCat("cannot map ", path, ": ", strerror(errno)));
    }
    mappings_.push_back({data, size});
  }
  close(fd);
  auto file = ParseSafetensors(std::string_view(static_cast<const char*>(data), size));
  if (!file.ok()) {
    return absl::DataLossError(absl::StrCat(path, ": ", file.status().message()));
  }
  for (SafetensorsEntry& e : file->tensors) {
    if (!by_name_.emplace(e.name, tensors_.size()).second) {
      return absl::DataLossError(
          absl::StrCat(path, ": tensor '", e.name, "' is also in another shard"));
    }
    tensors_.push_back(std::move(e));
  }
  return absl::OkStatus();
}

const SafetensorsEntry* SafetensorsReader::Find(std::string_view name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &tensors_[it->second];
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::OpenFile(
    const std::string& path) {
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader);
  if (absl::Status s = r->Add(path); !s.ok()) return s;
  return r;
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::OpenDir(
    const std::string& dir) {
  const std::string single = dir + "/" + kSafetensorsFile;
  const std::string index_path = dir + "/" + kSafetensorsIndexFile;
  if (access(single.c_str(), F_OK) == 0) return OpenFile(single);
  std::ifstream f(index_path);
  if (!f) {
    // save_pretrained(safe_serialization=False) and older transformers write pickles,
    // which run code when loaded: refused by name, with the way to convert them.
    for (const char* pickle : {"pytorch_model.bin", "pytorch_model.bin.index.json"}) {
      if (access((dir + "/" + pickle).c_str(), F_OK) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            dir, " holds ", pickle, " (PyTorch's pickle format, which attnserve does not read): "
            "save it as safetensors, e.g. model.save_pretrained(DIR, safe_serialization=True)"));
      }
    }
    return absl::NotFoundError(absl::StrCat(dir, " has neither ", kSafetensorsFile, " nor ",
                                            kSafetensorsIndexFile));
  }
  std::stringstream text;
  text << f.rdbuf();
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": ", why));
  };
  Json index;
  try {
    index = Json::parse(text.str());
  } catch (const Json::exception& e) {
    return bad(absl::StrCat("not valid JSON: ", e.what()));
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    return bad("weight_map is missing or not an object");
  }
  std::map<std::string, std::string> shard_of;
  std::set<std::string> shards;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string()) return bad(absl::StrCat("weight_map['", name, "'] is not a string"));
    const std::string file = shard.get<std::string>();
    if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..") {
      return bad(absl::StrCat("weight_map['", name, "'] = '", file,
                              "' is not a file name in the directory"));
    }
    shard_of[name] = file;
    shards.insert(file);
  }
  std::unique_ptr<SafetensorsReader> r(new SafetensorsReader);
  for (const std::string& shard : shards) {
    const size_t before = r->tensors_.size();
    if (absl::Status s = r->Add(dir + "/" + shard); !s.ok()) return s;
    for (size_t i = before; i < r->tensors_.size(); ++i) {
      const std::string& name = r->tensors_[i].name;
      auto it = shard_of.find(name);
      if (it == shard_of.end() || it->second != shard) {
        return bad(absl::StrCat("shard ", shard, " holds tensor '", name,
                                "' that weight_map does not place there"));
      }
    }
  }
  for (const auto& [name, shard] : shard_of) {
    if (r->Find(name) == nullptr) {
      return bad(absl::StrCat("weight_map places tensor '", name, "' in ", shard,
                              ", which does not hold it"));
    }
  }
  return r;
}

std::string SerializeSafetensors(absl::Span<const SafetensorsTensor> tensors,
                                 SafetensorsDtype dtype,
                                 const std::map<std::string, std::string>& metadata) {
  const size_t size = dtype == SafetensorsDtype::kF32 ? 4 : 2;
  const char* name = dtype == SafetensorsDtype::kF32   ? "F32"
                     : dtype == SafetensorsDtype::kF16 ? "F16"
                                                       : "BF16";
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t at = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    header[t.name] = {{"dtype", name}, {"shape", t.shape}, {"data_offsets", {at, at + numel * size}}};
    at += numel * size;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  out += json;
  out.reserve(out.size() + at);
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) numel *= uint64_t(d);
    if (dtype == SafetensorsDtype::kF32) {
      out.append(reinterpret_cast<const char*>(t.values), numel * 4);  // little-endian
      continue;
    }
    for (uint64_t i = 0; i < numel; ++i) {
      const uint16_t v = dtype == SafetensorsDtype::kF16 ? FloatToHalf(t.values[i])
                                                         : FloatToBf16(t.values[i]);
      out += char(v & 0xff);
      out += char(v >> 8);
    }
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path,
                              absl::Span<const SafetensorsTensor> tensors,
                              SafetensorsDtype dtype,
                              const std::map<std::string, std::string>& metadata) {
  const std::string bytes = SerializeSafetensors(tensors, dtype, metadata);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), std::streamsize(bytes.size()));
    f.close();
    if (!f) return absl::InternalError(absl::StrCat("cannot write ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path));
  }
  return absl::OkStatus();
}

}  // namespace attnserve::model
