// How a module turns the kernel-weighted value sum u_t = sum_j K(s_tj) v_j into o_t.
#pragma once

#include <ATen/core/Tensor.h>

namespace attnserve::attention {

enum class Normaliser {
  kSum,  // o = u / sum_j K(s_tj)          (softmax, taylor, linear)
  kL2,   // o = u / |u|_2, no denominator  (softmax_norm, taylor_norm: the paper's Norm)
};

// num: (..., Dv); den: (...) (unused and may be undefined for kL2) -> (..., Dv).
at::Tensor Normalise(Normaliser normaliser, const at::Tensor& num, const at::Tensor& den);

}  // namespace attnserve::attention
