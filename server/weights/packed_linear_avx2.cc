#include "server/weights/linear_internal.h"

namespace attnserve::weights {

// No kernels yet: PackedLinear falls back to PackedLinearScalar.
DotKernels Avx2Kernels(WeightType) { return {}; }

}  // namespace attnserve::weights
