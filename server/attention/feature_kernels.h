// Fused CPU loops for the fixed-state decode path. Torch-free, raw fp32 pointers,
// row-major. Each has a plain-ATen reference (TaylorFeatureMap::KeysReference and
// FeatureAttention's reference step) and a test that ties the two.
#pragma once

#include <cstdint>

namespace attnserve::attention {

// Packed monomial features. For each of `rows` rows of x (rows x d):
//   out[r][0] = 1, out[r][j] = out[r][parent[j]] * x[r][last[j]] for j = 1..m-1
// (parent[j] < j), then out[r][j] *= weight[j] if `weight` is non-null.
void MonomialFeatures(const float* x, int64_t rows, int64_t d, const int64_t* parent,
                      const int64_t* last, const float* weight, int64_t m, float* out);

// One decode token for one session, all heads, in a single pass over the state, which
// is per KV head h and read by the `group` query heads q = h * group + g of its group:
//   s[h] = g[h] s[h] + phi_k[h] v[h]^T   (m x dv per KV head; g[h] = 1 if decay is null)
//   z[h] = g[h] z[h] + phi_k[h]          (if z is non-null)
//   num[q] = phi_q[q]^T s[h]         (dv)
//   den[q] = phi_q[q] . z[h]         (if z is non-null)
// s: kv_heads x m x dv; z: kv_heads x m; phi_k: kv_heads x m; v: kv_heads x dv;
// phi_q: (kv_heads * group) x m; num: (kv_heads * group) x dv; den: kv_heads * group.
void StateUpdateAndRead(float* s, float* z, const float* phi_q, const float* phi_k,
                        const float* v, const float* decay, int64_t kv_heads, int64_t group,
                        int64_t m, int64_t dv, float* num, float* den);

// StateUpdateAndRead on a state kept in bf16 (AttentionOptions::state_bf16): each element
// of s and z is read into fp32, updated in fp32 and stored rounded to nearest even
// (bf16.h); num and den read the updated fp32 values, before rounding. On AVX-512 with
// dv of 16, 32, 48 or 64, s goes through a loop that keeps each row in registers;
// otherwise through StateUpdateAndReadBf16Plain.
void StateUpdateAndReadBf16(uint16_t* s, uint16_t* z, const float* phi_q,
                            const float* phi_k, const float* v, const float* decay,
                            int64_t kv_heads, int64_t group, int64_t m, int64_t dv, float* num,
                            float* den);
// The same in plain loops (what the compiler vectorises): the fallback, and what
// tests/attention/state_bf16_test.cc ties the AVX-512 loop to.
void StateUpdateAndReadBf16Plain(uint16_t* s, uint16_t* z, const float* phi_q,
                                 const float* phi_k, const float* v, const float* decay,
                                 int64_t kv_heads, int64_t group, int64_t m, int64_t dv,
                                 float* num, float* den);

// n bf16 values widened to fp32 (exact), and n fp32 values rounded to nearest even bf16:
// how the chunked prefill reads a bf16 state and stores it back.
void Bf16ToFloats(const uint16_t* x, int64_t n, float* out);
void FloatsToBf16(const float* x, int64_t n, uint16_t* out);

// Row i of x (rows x cols, row stride ldx) times scale[i].
void ScaleRows(float* x, int64_t rows, int64_t cols, int64_t ldx, const float* scale);

// T_N(s) = sum_{n<=N} s^n / n! in place for n values (Horner, as TaylorKernel):
// the Taylor kernel from dot products.
void TaylorPolynomial(float* s, int64_t n, int order);

// out[i] = sum_j a[i][j] for rows x cols a (row stride lda): row sums.
void RowSums(const float* a, int64_t rows, int64_t cols, int64_t lda, float* out);

// z += column sums of x (rows x cols, row stride ldx).
void AddColumnSums(const float* x, int64_t rows, int64_t cols, int64_t ldx, float* z);

}  // namespace attnserve::attention
