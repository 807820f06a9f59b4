#include "server/weights/linear_internal.h"

namespace attnserve::weights {

// No kernels yet: PackedLinear falls back to PackedLinearScalar.
DotKernels Avx512Kernels(WeightType) { return {}; }

}  // namespace attnserve::weights
