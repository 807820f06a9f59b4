#include "server/attention/normaliser.h"

#include <ATen/ATen.h>

namespace attnserve::attention {

at::Tensor Normalise(Normaliser normaliser, const at::Tensor& num, const at::Tensor& den) {
  if (normaliser == Normaliser::kSum) return num / den.unsqueeze(-1);
  // The clamp only matters for an all-zero u; a norm is scale-invariant, so callers may
  // rescale u (e.g. subtract a row max inside exp) freely.
  return num / num.norm(2, {-1}, /*keepdim=*/true).clamp_min(1e-30);
}

}  // namespace attnserve::attention
