#include "server/attention/taylor_features.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>

#include "server/attention/registry.h"

namespace attnserve::attention {
namespace {

double MaxAbsDiff(const at::Tensor& a, const at::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(TaylorFeatureMap, SizeIsBinomial) {
  EXPECT_EQ(TaylorFeatureMap(16, 2).size(), 153);
  EXPECT_EQ(TaylorFeatureMap(16, 4).size(), 4845);
  EXPECT_EQ(TaylorFeatureMap(6, 3).size(), 84);
  EXPECT_EQ(TaylorFeatureMap(5, 0).size(), 1);
}

TEST(TaylorFeatureMap, PackedFeaturesReproduceUnpackedTensorPowers) {
  at::manual_seed(1);
  for (int order : {1, 2, 3, 4}) {
    const int d = 6;
    TaylorFeatureMap map(d, order);
    at::Tensor q = at::randn({32, d}, at::kDouble);
    at::Tensor k = at::randn({32, d}, at::kDouble);
    // (32, 32) Gram matrices: packed vs unpacked (sum_n d^n features) vs T_N(q . k).
    at::Tensor packed = at::matmul(map.Queries(q.to(at::kFloat)).to(at::kDouble),
                                   map.Keys(k.to(at::kFloat)).to(at::kDouble).t());
    at::Tensor unpacked =
        at::matmul(TensorPowerFeatures(q, order), TensorPowerFeatures(k, order).t());
    at::Tensor kernel = TaylorKernel(at::matmul(q, k.t()), order);
    const double scale = kernel.abs().max().item<double>();
    EXPECT_LE(MaxAbsDiff(unpacked, kernel) / scale, 1e-12) << "order " << order;
    EXPECT_LE(MaxAbsDiff(packed, unpacked) / scale, 1e-5) << "order " << order;
    if (order >= 2) {  // packing pays from degree 2 on: C(d+1, 2) < d^2
      EXPECT_LT(map.size(), TensorPowerFeatures(q, order).size(-1)) << "order " << order;
    }
  }
}

TEST(TaylorFeatureMap, FusedLoopMatchesReferenceOps) {
  at::manual_seed(4);
  for (int order : {1, 2, 4, 6}) {
    TaylorFeatureMap map(8, order);
    at::Tensor x = at::randn({3, 5, 8});
    EXPECT_LE(MaxAbsDiff(map.Keys(x), map.KeysReference(x)), 1e-5) << "order " << order;
    EXPECT_LE(MaxAbsDiff(map.Queries(x), map.QueriesReference(x)), 1e-5) << "order " << order;
    // Non-contiguous input (a transposed view) gives the same features.
    at::Tensor xt = at::randn({8, 7}).t();
    EXPECT_LE(MaxAbsDiff(map.Keys(xt), map.KeysReference(xt.contiguous())), 1e-5);
  }
}

TEST(TaylorKernel, EqualsTruncatedSeries) {
  at::Tensor s = at::linspace(-4, 4, 81, at::kDouble);
  for (int order : {0, 1, 2, 5, 8}) {
    at::Tensor series = at::zeros_like(s);
    double factorial = 1;
    for (int n = 0; n <= order; ++n) {
      if (n > 0) factorial *= n;
      series += at::pow(s, n) / factorial;
    }
    EXPECT_LE(MaxAbsDiff(TaylorKernel(s, order), series), 1e-12) << "order " << order;
  }
}

// Attention with kernel T_N written out directly in double precision.
at::Tensor DirectTaylorAttention(const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v, int order) {
  const int64_t t = q.size(-2);
  at::Tensor s = at::matmul(q, k.transpose(-1, -2)) / std::sqrt(double(q.size(-1)));
  at::Tensor a = at::zeros_like(s);
  double factorial = 1;
  for (int n = 0; n <= order; ++n) {
    if (n > 0) factorial *= n;
    a += at::pow(s, n) / factorial;
  }
  a = a * at::ones({t, t}, a.options()).tril();
  return at::matmul(a, v) / a.sum(-1, /*keepdim=*/true);
}

TEST(TaylorAttention, OutputEqualsAttentionWithKernelTN) {
  at::manual_seed(2);
  for (int order : {2, 4, 6}) {
    AttentionOptions o;
    o.module = "taylor";
    o.order = order;
    o.num_heads = 2;
    o.num_kv_heads = 2;
    o.head_dim = 8;
    o.value_dim = 8;
    o.chunk_size = 24;
    auto attn = CreateAttention(o).value();
    at::Tensor q = at::randn({1, 2, 100, 8}), k = at::randn({1, 2, 100, 8}),
               v = at::randn({1, 2, 100, 8});
    at::Tensor direct = DirectTaylorAttention(q.to(at::kDouble), k.to(at::kDouble),
                                              v.to(at::kDouble), order);
    EXPECT_LE(MaxAbsDiff(attn->Parallel(q, k, v).to(at::kDouble), direct), 1e-5)
        << "parallel, order " << order;
    // The feature path (state products) computes the same thing.
    auto state = attn->NewState();
    at::Tensor pre = attn->Prefill(*state, q[0], k[0], v[0]);
    EXPECT_LE(MaxAbsDiff(pre.to(at::kDouble), direct[0]), 1e-4) << "prefill, order " << order;
  }
}

TEST(TaylorAttention, ErrorAgainstSoftmaxFallsWithOrderUnderQkNorm) {
  at::manual_seed(3);
  AttentionOptions o;
  o.qk_norm = true;
  o.qk_temperature = 2.0f;  // logits bounded by |s| <= 2
  o.num_heads = 2;
  o.num_kv_heads = 2;
  o.head_dim = 8;
  o.value_dim = 8;
  at::Tensor q = at::randn({1, 2, 128, 8}), k = at::randn({1, 2, 128, 8}),
             v = at::randn({1, 2, 128, 8});
  o.module = "softmax";
  at::Tensor exact = CreateAttention(o).value()->Parallel(q, k, v);
  o.module = "taylor";
  double previous = INFINITY;
  for (int order : {2, 4, 6, 8}) {
    o.order = order;
    const double err = MaxAbsDiff(CreateAttention(o).value()->Parallel(q, k, v), exact);
    EXPECT_LT(err, previous) << "order " << order;
    previous = err;
  }
  EXPECT_LT(previous, 1e-3);  // order 8 at |s| <= 2: T_8 is within 3e-4 of exp
}

}  // namespace
}  // namespace attnserve::attention
