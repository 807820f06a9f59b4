// Torch-free kernels of the KV-cache modules (KvAttention::StepRaw, PrefillRaw), on raw
// fp32 row-major buffers. Their reference is KvAttention::Step / Prefill (masked softmax
// through ATen); tests/model/model_step_test.cc ties the fused model step and prefill
// that use them to that path, tests/attention/kv_kernels_test.cc ties ExpShifted to
// std::exp and KvBlockAttend, KvFlashAttend to a plain causal softmax loop.
#pragma once

#include <cstdint>

#include "absl/types/span.h"
#include "server/attention/options.h"

namespace attnserve::attention {

// --- Stored rows (AttentionOptions::kv_cache_type). ---

// fp32 -> IEEE half, round to nearest even, as LibTorch's at::Half rounds (subnormals
// kept, overflow to infinity; every NaN becomes a quiet NaN of the same sign), and back
// (exact). Integer and float operations only, no table.
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Stores n fp32 values as `type` at out (KvRowBytes(type, n) bytes): 16-bit types
// rounded to nearest even, as a copy_ into an at::kHalf / at::kBFloat16 tensor rounds,
// so the fused loops and the ATen reference store the same bits (NaNs aside: the vector
// loop keeps a NaN's payload where the scalar one does not); q8_0 quantized block by
// block as ggml's quantize_row_q8_0_ref does (n a multiple of 32, blocks of 32 values
// that never straddle two rows when n is a whole number of rows).
void StoreKvRow(KvCacheType type, const float* x, int64_t n, void* out);
// Reads n stored values of `type` as fp32 (exact for the float types; q * d for q8_0).
void LoadKvRows(KvCacheType type, const void* x, int64_t n, float* out);

// One KV head's part of one block of a cache: `rows` keys (rows, D) and values
// (rows, Dv), row-major, stored as the cache's type.
struct KvSpan {
  const void* k;
  const void* v;
  int64_t rows;
};

// Floats of tile scratch KvGroupAttendSpans needs for head dims d, dv.
int64_t KvSpanTileFloats(int64_t d, int64_t dv);

// KvGroupAttend over a cache kept in spans (its blocks, in position order; together
// `len` rows, the new token's included) of stored type `type`: scores (rows, len) are
// computed span by span, exp'd once over the whole row, and the values accumulated span
// by span. Rows not stored as fp32 are read into `tile` (KvSpanTileFloats floats), a
// tile of at most 256 rows at a time, so the cache is read once in its stored bytes; on
// AVX-512, for head dims that are multiples of 16 and groups of up to 8 query heads,
// 16-bit and q8_0 rows are read in place instead (each row converted in registers, once for
// the whole group). Either way, sums and scores as KvGroupAttend's.
// scores: rows * len floats.
void KvGroupAttendSpans(KvCacheType type, const float* q, absl::Span<const KvSpan> spans,
                        int64_t rows, int64_t len, int64_t d, int64_t dv, float* scores,
                        float* tile, float* out, float* sums);

// x[i] = exp(x[i] - shift) for n values with x[i] <= shift, and returns their sum. A
// range-reduced polynomial (relative error below 2e-7 against std::exp) that the
// compiler vectorises; results under exp(-87) flush to about 1e-38.
float ExpShifted(float* x, int64_t n, float shift);

// One head of one session over its `len` cached keys k (len, d) and values v (len, dv)
// (rows of the cache; the new token's included): with s_j = q . k_j and
// w_j = exp(s_j - max s), writes out (dv) = sum_j w_j v_j and returns sum_j w_j, so the
// softmax output is out / sum. scores: len floats of scratch. Two sgemv calls
// (libblas.so.3) and one pass of ExpShifted.
float KvHeadAttend(const float* q, const float* k, const float* v, int64_t len, int64_t d,
                   int64_t dv, float* scores, float* out);

// KvHeadAttend for the `rows` query heads of one KV head group (grouped-query
// attention), all at the same position and so seeing all `len` keys: q (rows, d)
// contiguous, k (len, d), v (len, dv); out (rows, dv) receives sum_j w_ij v_j and sums[i]
// sum_j w_ij. The cache is read once for the whole group: one sgemm for the scores
// (rows, len), one pass of ExpShifted per row, one sgemm for the values. rows == 1 is
// KvHeadAttend. scores: rows * len floats of scratch.
void KvGroupAttend(const float* q, const float* k, const float* v, int64_t rows, int64_t len,
                   int64_t d, int64_t dv, float* scores, float* out, float* sums);

// A block of `rows` consecutive queries of one head against its cache, causally: query i
// sits at position first + i and sees keys 0..first + i. q (rows, d) with row stride ldq;
// k (first + rows, d), v (first + rows, dv) contiguous; out (rows, dv) with row stride
// ldo receives sum_j w_ij v_j and sums[i] sum_j w_ij (w_ij = exp(s_ij - max_j s_ij)).
// scores: rows * (first + rows) floats of scratch. Two sgemm calls and one pass of
// ExpShifted per row.
void KvBlockAttend(const float* q, int64_t ldq, const float* k, const float* v,
                   int64_t first, int64_t rows, int64_t d, int64_t dv, float* scores,
                   float* out, int64_t ldo, float* sums);

// Whether KvFlashAttend runs on this CPU for these head dims (AVX-512F, d == dv in
// {16, 32, 64}).
bool KvFlashSupported(int64_t d, int64_t dv);

// KvBlockAttend's contract without the score scratch, for any number of rows: a fused
// flash-attention loop (online softmax: a running row max, rescaling the partial sums
// when it grows) that keeps 16 queries in the lanes of a vector and never materialises
// the scores. Does nothing unless KvFlashSupported(d, dv).
void KvFlashAttend(const float* q, int64_t ldq, const float* k, const float* v, int64_t first,
                   int64_t rows, int64_t d, int64_t dv, float* out, int64_t ldo, float* sums);

}  // namespace attnserve::attention
