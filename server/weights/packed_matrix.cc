#include "server/weights/packed_matrix.h"

#include <cstring>
#include <new>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/weights/linear_internal.h"

namespace attnserve::weights {
namespace {

struct TypeInfo {
  const char* name;
  int64_t values, bytes;
};

TypeInfo Info(WeightType type) {
  switch (type) {
    case WeightType::kF32: return {"F32", 1, 4};
    case WeightType::kF16: return {"F16", 1, 2};
    case WeightType::kBF16: return {"BF16", 1, 2};
    case WeightType::kQ8_0: return {"Q8_0", 32, 34};
    case WeightType::kQ4_0: return {"Q4_0", 32, 18};
    case WeightType::kQ4_K: return {"Q4_K", 256, 144};
    case WeightType::kQ5_K: return {"Q5_K", 256, 176};
    case WeightType::kQ6_K: return {"Q6_K", 256, 210};
  }
  return {"?", 1, 1};
}

// 64-byte aligned bytes, shared, with kTailPad readable bytes past the end (linear_internal.h).
std::shared_ptr<uint8_t[]> AllocateAligned(int64_t bytes) {
  const size_t size = size_t(bytes + kTailPad + 63) / 64 * 64;
  auto* p = static_cast<uint8_t*>(::operator new[](size == 0 ? 64 : size, std::align_val_t(64)));
  return std::shared_ptr<uint8_t[]>(
      p, [](uint8_t* q) { ::operator delete[](q, std::align_val_t(64)); });
}

absl::Status CheckShape(WeightType type, int64_t out, int64_t in) {
  if (out < 0 || in < 0 || in % BlockValues(type) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("packed matrix (", out, ", ", in, ") of ",
                                                   WeightTypeName(type), ": in must be a "
                                                   "multiple of ", BlockValues(type)));
  }
  return absl::OkStatus();
}

}  // namespace

const char* WeightTypeName(WeightType type) { return Info(type).name; }
int64_t BlockValues(WeightType type) { return Info(type).values; }
int64_t BlockBytes(WeightType type) { return Info(type).bytes; }
int64_t RowBytes(WeightType type, int64_t in) {
  return in / BlockValues(type) * BlockBytes(type);
}

std::optional<WeightType> FromGgmlType(uint32_t ggml) {
  switch (ggml) {
    case 0: return WeightType::kF32;
    case 1: return WeightType::kF16;
    case 2: return WeightType::kQ4_0;
    case 8: return WeightType::kQ8_0;
    case 12: return WeightType::kQ4_K;
    case 13: return WeightType::kQ5_K;
    case 14: return WeightType::kQ6_K;
    case 30: return WeightType::kBF16;
    default: return std::nullopt;
  }
}

absl::StatusOr<PackedMatrix> PackedMatrix::Copy(WeightType type, int64_t out, int64_t in,
                                                const void* bytes) {
  if (absl::Status s = CheckShape(type, out, in); !s.ok()) return s;
  PackedMatrix m;
  m.type_ = type;
  m.out_ = out;
  m.in_ = in;
  m.row_bytes_ = RowBytes(type, in);
  m.data_ = AllocateAligned(m.bytes());
  std::memset(m.data_.get() + m.bytes(), 0, kTailPad);
  if (m.bytes() > 0) std::memcpy(m.data_.get(), bytes, size_t(m.bytes()));
  return m;
}

absl::StatusOr<PackedMatrix> PackedMatrix::Quantize(WeightType type, int64_t out, int64_t in,
                                                    const float* w) {
  if (absl::Status s = CheckShape(type, out, in); !s.ok()) return s;
  PackedMatrix m;
  m.type_ = type;
  m.out_ = out;
  m.in_ = in;
  m.row_bytes_ = RowBytes(type, in);
  m.data_ = AllocateAligned(m.bytes());
  std::memset(m.data_.get() + m.bytes(), 0, kTailPad);
  for (int64_t r = 0; r < out; ++r) {
    QuantizeRow(type, w + r * in, m.data_.get() + r * m.row_bytes_, in);
  }
  return m;
}

void PackedMatrix::DequantizeRowTo(int64_t r, float* dst) const {
  DequantizeRow(type_, row(r), dst, in_);
}

PackedMatrix PackedMatrix::PermuteRows(const int64_t* perm) const {
  PackedMatrix m = *this;
  m.data_ = AllocateAligned(bytes());
  std::memset(m.data_.get() + bytes(), 0, kTailPad);
  for (int64_t i = 0; i < out_; ++i) {
    std::memcpy(m.data_.get() + i * row_bytes_, row(perm[i]), size_t(row_bytes_));
  }
  return m;
}

void PackedLinearReference(const float* x, int64_t rows, const PackedMatrix& w, float* y,
                           float beta) {
  std::vector<float> wr(static_cast<size_t>(w.in()));
  for (int64_t o = 0; o < w.out(); ++o) {
    w.DequantizeRowTo(o, wr.data());
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * w.in();
      double sum = 0;
      for (int64_t i = 0; i < w.in(); ++i) sum += double(xr[i]) * double(wr[i]);
      float& out = y[r * w.out() + o];
      out = beta == 0.0f ? float(sum) : beta * out + float(sum);
    }
  }
}

}  // namespace attnserve::weights
