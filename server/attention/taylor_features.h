// The Taylor kernel T_N(s) = sum_{n<=N} s^n / n! and its feature maps (server/DESIGN.md
// §1).
//
// (q . k)^n / n! = sum over multi-indices a with |a| = n of q^a k^a / prod_i a_i!, so
// T_N(q . k) = Queries(q) . Keys(k) with one feature per distinct monomial of degree
// <= N: m = C(d+N, N) features instead of sum_n d^n for the unpacked tensor powers.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace attnserve::attention {

// Elementwise T_N(s), any shape.
at::Tensor TaylorKernel(const at::Tensor& s, int order);

// Packed symmetric monomial features for dimension `dim`, orders 0..`order`.
// Immutable after construction; safe to share across threads.
class TaylorFeatureMap {
 public:
  TaylorFeatureMap(int dim, int order);

  // m = C(dim + order, order).
  int64_t size() const { return size_; }

  // x: (..., D) -> (..., m): every monomial x^a with |a| <= N, once, ordered by degree.
  // fp32 inputs without autograd take the fused loop (MonomialFeatures); anything else
  // takes KeysReference.
  at::Tensor Keys(const at::Tensor& x) const;

  // x: (..., D) -> (..., m): Keys(x) with each monomial weighted by 1 / prod_i a_i!,
  // so Queries(q) . Keys(k) = T_N(q . k).
  at::Tensor Queries(const at::Tensor& x) const;

  // Keys and Queries on raw fp32 rows for the fused decode step: x (rows, D) ->
  // out (rows, m), row-major; no LibTorch ops.
  void KeysInto(const float* x, int64_t rows, float* out) const;
  void QueriesInto(const float* x, int64_t rows, float* out) const;

  // The same features from plain ATen ops (gathers per degree); differentiable.
  at::Tensor KeysReference(const at::Tensor& x) const;
  at::Tensor QueriesReference(const at::Tensor& x) const;

 private:
  // Fused-loop features, with `weight` (m) applied if non-null.
  at::Tensor Features(const at::Tensor& x, const float* weight) const;

  int dim_;
  int order_;
  int64_t size_;
  // For degree n >= 1 (index n-1): each degree-n monomial is a degree-(n-1) monomial
  // (its parent, indexed within degree n-1) times x[last]; last index is non-decreasing.
  std::vector<at::Tensor> parent_;
  std::vector<at::Tensor> last_;
  // The same recursion over the whole feature vector, for the fused loop: feature j
  // (j >= 1) is feature global_parent_[j] times x[global_last_[j]].
  std::vector<int64_t> global_parent_;
  std::vector<int64_t> global_last_;
  at::Tensor weights_;  // (m): 1 / prod_i a_i!
};

// Reference for tests: the unpacked tensor powers x^(x)n / sqrt(n!) for n = 0..N,
// concatenated: (..., D) -> (..., sum_n D^n). F(q) . F(k) = T_N(q . k).
at::Tensor TensorPowerFeatures(const at::Tensor& x, int order);

}  // namespace attnserve::attention
