// Torch-free decode kernel of the KV-cache modules (KvAttention::StepRaw), on raw fp32
// row-major buffers. Its reference is KvAttention::Step (masked softmax through ATen);
// tests/model/model_step_test.cc ties the fused model step that uses it to that path.
#pragma once

#include <cstdint>

namespace attnserve::attention {

// One head of one session over its `len` cached keys k (len, d) and values v (len, dv)
// (rows of the cache; the new token's included): with s_j = q . k_j and
// w_j = exp(s_j - max s), writes out (dv) = sum_j w_j v_j and returns sum_j w_j, so the
// softmax output is out / sum. scores: len floats of scratch. Two sgemv calls
// (libblas.so.3) and one pass of exp.
float KvHeadAttend(const float* q, const float* k, const float* v, int64_t len, int64_t d,
                   int64_t dv, float* scores, float* out);

}  // namespace attnserve::attention
