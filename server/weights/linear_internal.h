// What PackedLinear's paths share: the quantized activations and the per-row dot kernels
// of each instruction set. Internal to server/weights (and its tests).
#pragma once

#include <cstdint>

#include "server/weights/packed_matrix.h"

namespace attnserve::weights {

// The activation rows x (rows, in) as the kernels read them. For F32 / F16 / BF16 weights
// only x is set. For the quantized types each block of 32 values of a row is quantized to
// int8 with its own scale d = max|x| / 127, q = round-to-nearest-even(x / d), so
// x ~= d * q with |error| <= d / 2 per value:
//   q  (rows, in)        the int8 values
//   dl (rows, in / 4)    d of the block, once per 4 values (the lanes of an int32 dot)
//   ds (rows, in / 32)   d * (sum of the block's q): a K-quant's min term is -dmin*m*ds
//   k4_order             q and dl are in QuantizeActivations' k4_order
struct Activations {
  int64_t in = 0;
  const float* x = nullptr;
  const int8_t* q = nullptr;
  const float* dl = nullptr;
  const float* ds = nullptr;
  bool k4_order = false;
};

// Quantizes x (rows, in) into scratch (grown as needed); `in` a multiple of 32.
// k4_order (in a multiple of 256): within each 256 values, q and dl hold the blocks of 32
// in the order 0, 2, 1, 3, 4, 6, 5, 7 (ds stays in order), which is how 64 bytes of Q4_K /
// Q5_K nibbles unpack: low nibbles sub-blocks 4k and 4k + 2, high ones 4k + 1 and 4k + 3.
Activations QuantizeActivations(const float* x, int64_t rows, int64_t in,
                                LinearScratch& scratch, bool k4_order = false);

// PackedMatrix allocates this many bytes past its data (zeroed), so kernels may load whole
// 64-byte vectors that run past the last block.
constexpr int64_t kTailPad = 64;

// sums[r] = dot(row w of the matrix, activation row r0 + r) for r < R: one kernel per
// weight type and R = 1..kMaxTileRows.
constexpr int kMaxTileRows = 4;
using DotKernel = void (*)(const uint8_t* w, const Activations& a, int64_t r0, float* sums);
struct DotKernels {
  DotKernel rows[kMaxTileRows] = {};  // rows[R - 1]
};
// nullptr-filled when the type has no kernel on that instruction set.
DotKernels Avx512Kernels(WeightType type);
DotKernels Avx2Kernels(WeightType type);

// Which path PackedLinear takes; kAuto picks the best the CPU has. For tests and benches.
enum class LinearPath { kAuto, kAvx512, kAvx2, kScalar };
void SetLinearPathForTesting(LinearPath path);
// The path kAuto resolves to on this CPU.
LinearPath BestLinearPath();

}  // namespace attnserve::weights
