// Torch-free loops and BLAS calls of the fused decode step (Model::StepFused), on raw
// fp32 row-major buffers. Each mirrors one LibTorch op of Model::Run, the reference;
// tests/model/model_test.cc (FusedStep) ties the whole step to it, and
// tests/model/step_kernels_test.cc ties each loop to its formula.
#pragma once

#include <cstdint>

namespace attnserve::model {

// y (rows, out) = x (rows, in) W^T (+ beta * y), W (out, in) as LibTorch stores linear
// weights: at::linear. One sgemv for one row; otherwise one sgemm computing
// (W x^T) (out, rows) into `scratch` (rows * out floats), then transposed into y: OpenBLAS
// runs that orientation 25-30% faster than x W^T for 8-32 rows at our widths; from 64 rows
// (prefill) one sgemm x W^T straight into y, with beta. BLAS is
// libblas.so.3, the one LibTorch calls. beta 0 ignores what y held; beta 1 accumulates
// (the residual).
void Linear(const float* x, int64_t rows, int64_t in, const float* w, int64_t out, float* y,
            float beta, float* scratch);

// out (rows, dim) = x * rsqrt(mean(x^2) + eps) * g, row by row: the model's RmsNorm.
void RmsNormRows(const float* x, int64_t rows, int64_t dim, const float* g, float eps,
                 float* out);

// RoPE in place on x (rows, heads, d): row r's pairs (x_i, x_{i+d/2}) rotated by the
// angle whose cos, sin are cos[r * d/2 + i], sin[r * d/2 + i]: the model's Rope.
void RopeRows(float* x, int64_t rows, int64_t heads, int64_t d, const float* cos,
              const float* sin);

// gate[i] = silu(gate[i]) * up[i] for n elements: SwiGLU's silu(x W_gate^T) * x W_up^T.
void SiluMul(float* gate, const float* up, int64_t n);

}  // namespace attnserve::model
