// Linear weights kept in the bytes their file holds (server/DESIGN.md §3): a matrix
// W (out, in) whose rows are whole blocks of one type, and the kernels that compute
// y = x W^T from those bytes. Torch-free leaves: nothing here knows of models or sessions.
//
// Types (ggml's block layouts, ggml-common.h; little-endian):
//   F32, F16, BF16   one value per element
//   Q8_0   32 values in 34 bytes: f16 d, 32 int8 q               -> d * q
//   Q4_0   32 values in 18 bytes: f16 d, 16 bytes of nibbles      -> d * (q - 8)
//   Q4_K  256 values in 144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins
//          for 8 sub-blocks of 32, 128 bytes of nibbles          -> d * sc * q - dmin * m
//   Q5_K  256 values in 176 bytes: Q4_K plus 32 bytes of fifth bits
//   Q6_K  256 values in 210 bytes: 128 bytes low 4 bits, 64 bytes high 2 bits, 16 int8
//          scales, f16 d                                          -> d * sc * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace attnserve::weights {

enum class WeightType : uint8_t { kF32, kF16, kBF16, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };

// "F32", "Q4_K", ...
const char* WeightTypeName(WeightType type);
// The type of ggml_type id `ggml` (F32 0, F16 1, Q4_0 2, Q8_0 8, Q4_K 12, Q5_K 13,
// Q6_K 14, BF16 30); nullopt for the others.
std::optional<WeightType> FromGgmlType(uint32_t ggml);
// Values per block and bytes per block (1 and 4 for F32, 1 and 2 for F16 / BF16).
int64_t BlockValues(WeightType type);
int64_t BlockBytes(WeightType type);
// Bytes of a row of `in` values; `in` must be a multiple of BlockValues(type).
int64_t RowBytes(WeightType type, int64_t in);

// The plain reference: row of `n` values (a multiple of BlockValues) from `src` to fp32,
// bit for bit what ggml's dequantize_row_* gives.
void DequantizeRow(WeightType type, const uint8_t* src, float* dst, int64_t n);
// The reverse, for quantizing at load (--quantize) and for tests: `n` fp32 values to one
// row of blocks (ggml's reference rounding, quantize_row_*_ref, without an importance
// matrix). F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K.
void QuantizeRow(WeightType type, const float* src, uint8_t* dst, int64_t n);

// W (out, in): `out` rows of RowBytes(type, in) bytes each, row r at data() + r * row_bytes(),
// in memory this object owns (64-byte aligned), shared by copies (immutable).
class PackedMatrix {
 public:
  PackedMatrix() = default;
  // A copy of `bytes` (out * RowBytes(type, in) of them). INVALID_ARGUMENT when `in` is
  // not a whole number of blocks.
  static absl::StatusOr<PackedMatrix> Copy(WeightType type, int64_t out, int64_t in,
                                           const void* bytes);
  // `w` (out, in) fp32 quantized to `type` row by row (QuantizeRow).
  static absl::StatusOr<PackedMatrix> Quantize(WeightType type, int64_t out, int64_t in,
                                               const float* w);

  WeightType type() const { return type_; }
  int64_t out() const { return out_; }
  int64_t in() const { return in_; }
  int64_t row_bytes() const { return row_bytes_; }
  int64_t bytes() const { return out_ * row_bytes_; }
  const uint8_t* data() const { return data_.get(); }
  const uint8_t* row(int64_t r) const { return data_.get() + r * row_bytes_; }
  // Row r as fp32 (DequantizeRow): dst holds in() floats.
  void DequantizeRowTo(int64_t r, float* dst) const;
  // A copy whose row i is this one's row perm[i] (perm: out() indices).
  PackedMatrix PermuteRows(const int64_t* perm) const;

 private:
  WeightType type_ = WeightType::kF32;
  int64_t out_ = 0, in_ = 0, row_bytes_ = 0;
  std::shared_ptr<uint8_t[]> data_;
};

// y (rows, out) = x (rows, in) W^T (+ beta * y): step_kernels.h Linear's contract on a
// packed W. beta 0 ignores what y held; beta 1 accumulates (the residual).
// The fast path (AVX-512 VNNI where the CPU has it, AVX2 else, chosen at run time):
// for the quantized types each row of x is quantized per block of 32 to int8 with one
// fp32 scale (as llama.cpp's Q8_0 / Q8_K activations), and blocks are integer dot
// products; F16 / BF16 widen to fp32. Each weight block is read once per call for all
// rows (a decode step of B sessions reads W once); a prefill's many rows go through in
// tiles. `scratch` is grown as needed and may be reused across calls.
struct LinearScratch {
  std::unique_ptr<int8_t[]> q;  // quantized activations
  std::unique_ptr<float[]> f;   // their scales and block sums
  int64_t q_size = 0, f_size = 0;
};
void PackedLinear(const float* x, int64_t rows, const PackedMatrix& w, float* y, float beta,
                  LinearScratch& scratch);
// The plain reference PackedLinear is tested against: each row of W dequantized
// (DequantizeRow) and dotted with x in fp32 (double accumulation).
void PackedLinearReference(const float* x, int64_t rows, const PackedMatrix& w, float* y,
                           float beta);
// The fast path's own arithmetic in plain scalar code (activations quantized the same
// way, integer block sums): what the SIMD kernels must equal up to float summation order.
void PackedLinearScalar(const float* x, int64_t rows, const PackedMatrix& w, float* y,
                        float beta);

}  // namespace attnserve::weights
