// Torch-free loops and BLAS calls of the fused decode step (Model::StepFused), on raw
// fp32 row-major buffers. Each mirrors one LibTorch op of Model::Run, the reference;
// tests/model/model_test.cc (FusedStep) ties the whole step to it, and
// tests/model/step_kernels_test.cc ties each loop to its formula.
#pragma once

#include <cstdint>
#include <vector>

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

// A linear weight W (out, in) rounded to bf16 (the high 16 bits of an fp32, rounded to
// nearest even) and packed for LinearBf16: blocks of 64 outputs, each (in, 64) with the
// outputs past `out` zero, so the kernel streams every weight once per group of rows.
struct Bf16Matrix {
  int64_t in = 0, out = 0;
  std::vector<uint16_t> packed;  // (ceil(out / 64), in, 64)
};
Bf16Matrix PackBf16(const float* w, int64_t out, int64_t in);

// The most rows Model sends through LinearBf16: up to 32 it beat the fp32 path at the mid
// and large shapes (1.6x at 1 row, 1.1-1.3x at 32; tests/bench/roofline_bench.cc
// --weights_bf16); larger calls (prefill blocks) keep one fp32 sgemm.
constexpr int64_t kBf16MaxRows = 32;

// y (rows, out) = x (rows, in) W^T (+ beta * y) with W in bf16: Linear's contract, half
// the weight bytes. fp32 arithmetic (each weight widened exactly); AVX-512F where the CPU
// has it, else LinearBf16Reference. Groups of 4 rows share each pass over the weights.
void LinearBf16(const float* x, int64_t rows, const Bf16Matrix& w, float* y, float beta);
// The plain loops LinearBf16 is tested against (tests/model/step_kernels_test.cc).
void LinearBf16Reference(const float* x, int64_t rows, const Bf16Matrix& w, float* y,
                         float beta);

// out (rows, dim) = x * rsqrt(mean(x^2) + eps) * g, row by row: the model's RmsNorm.
void RmsNormRows(const float* x, int64_t rows, int64_t dim, const float* g, float eps,
                 float* out);

// RoPE in place on x (rows, heads, d) over the first `rot` of each head's d (0: all d):
// row r's pairs (x_i, x_{i+rot/2}) rotated by the angle whose cos, sin are
// cos[r * rot/2 + i], sin[r * rot/2 + i]; x_rot .. x_{d-1} are left alone: the model's
// Rope.
void RopeRows(float* x, int64_t rows, int64_t heads, int64_t d, const float* cos,
              const float* sin, int64_t rot = 0);

// x[i] *= sigmoid(gate[i]) for n elements: Qwen3.5's gated attention output.
void SigmoidGate(float* x, const float* gate, int64_t n);

// Qwen3-Next's Gated DeltaNet heads back to the file's order (ModelConfig::
// gdn_grouped_heads): y (rows, n_v, d_v) holds file head g r + j at head j n_k + g
// (r = n_v / n_k); out (rows, n_v, d_v) gets each at its own index. out must not be y.
void UngroupHeads(const float* y, int64_t rows, int64_t key_heads, int64_t value_heads,
                  int64_t head_dim, float* out);

// gate[i] = silu(gate[i]) * up[i] for n elements: SwiGLU's silu(x W_gate^T) * x W_up^T.
void SiluMul(float* gate, const float* up, int64_t n);

}  // namespace attnserve::model
