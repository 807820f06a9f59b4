// A mixture-of-experts FFN (server/DESIGN.md §14; llama.cpp's build_moe_ffn): per row x
// (dim), router logits r = x W_router^T (E); the experts_used experts by the config's
// routing; out = sum over them of weight_e * down_e(silu(gate_e x) * up_e x), plus the
// shared expert down(silu(gate x) * up x), times sigmoid(shared_gate . x) when gated.
//   softmax:       p = softmax(r); the top k of p (+ bias); weights p_e
//   softmax_topk:  the top k of r; weights softmax over those k (Mixtral)
//   sigmoid:       p = sigmoid(r); the top k of p + bias (the bias only selects); p_e
// then, with expert_renormalize, weights / max(sum, 2^-14) (llama.cpp's clamp), times
// expert_weights_scale.
// MoeRef is the LibTorch reference (Model::Run); MoeRows the fused pass's, which groups
// the rows by expert so that each expert's weights are read once per call for all the
// rows routed to it (a decode step of B sessions, a prompt's tokens).
#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "server/model/model.h"
#include "server/model/step_kernels.h"

namespace attnserve::model {
namespace {

float* Grow(std::vector<float>& buffer, int64_t n) {
  if (int64_t(buffer.size()) < n) buffer.resize(n);
  return buffer.data();
}

}  // namespace

void Model::Route(const Layer& l, const float* logits, int32_t* experts, float* weights) const {
  const int64_t e = config_.experts, k = config_.experts_used;
  const std::string& routing = config_.expert_routing;
  std::vector<float> probs(logits, logits + e);
  if (routing == "softmax") {
    const float top = *std::max_element(probs.begin(), probs.end());
    float sum = 0;
    for (float& p : probs) sum += (p = std::exp(p - top));
    for (float& p : probs) p /= sum;
  } else if (routing == "sigmoid") {
    for (float& p : probs) p = 1.0f / (1.0f + std::exp(-p));
  }
  std::vector<float> select = probs;
  if (l.expert_bias.defined()) {
    const float* bias = l.expert_bias.data_ptr<float>();
    for (int64_t j = 0; j < e; ++j) select[j] += bias[j];
  }
  std::vector<int32_t> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
    return select[a] > select[b] || (select[a] == select[b] && a < b);
  });
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = order[j];
    weights[j] = probs[order[j]];
  }
  if (routing == "softmax_topk") {  // softmax over the chosen logits
    const float top = weights[0];
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += (weights[j] = std::exp(weights[j] - top));
    for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
  }
  if (config_.expert_renormalize) {
    float sum = 0;
    for (int64_t j = 0; j < k; ++j) sum += weights[j];
    sum = std::max(sum, 6.103515625e-5f);
    for (int64_t j = 0; j < k; ++j) weights[j] /= sum;
  }
  if (config_.expert_weights_scale != 1.0f) {
    for (int64_t j = 0; j < k; ++j) weights[j] *= config_.expert_weights_scale;
  }
}

at::Tensor Model::MoeRef(const Layer& l, const at::Tensor& hn) const {
  const int64_t dim = config_.dim, k = config_.experts_used;
  at::Tensor x = hn.reshape({-1, dim}).contiguous();  // (N, dim)
  const int64_t n = x.size(0);
  at::Tensor logits = LinearRef(x, l.router, l.packed[kRouter]).contiguous();  // (N, E)
  std::vector<int32_t> experts(size_t(n * k));
  std::vector<float> weights(size_t(n * k));
  for (int64_t i = 0; i < n; ++i) {
    Route(l, logits.data_ptr<float>() + i * config_.experts, experts.data() + i * k,
          weights.data() + i * k);
  }
  at::Tensor out = at::zeros({n, dim}, at::kFloat);
  for (int32_t e = 0; e < config_.experts; ++e) {
    std::vector<int64_t> rows;
    std::vector<float> w;
    for (int64_t i = 0; i < n * k; ++i) {
      if (experts[size_t(i)] == e) {
        rows.push_back(i / k);
        w.push_back(weights[size_t(i)]);
      }
    }
    if (rows.empty()) continue;
    const Expert& ex = l.experts[size_t(e)];
    at::Tensor idx = at::tensor(rows, at::kLong);
    at::Tensor xe = x.index_select(0, idx);
    at::Tensor y = LinearRef(at::silu(LinearRef(xe, ex.gate, ex.gate_packed)) *
                                 LinearRef(xe, ex.up, ex.up_packed),
                             ex.down, ex.down_packed);  // (n_e, dim)
    out.index_add_(0, idx, y * at::tensor(w, at::kFloat).unsqueeze(1));
  }
  if (config_.shared_expert_hidden > 0) {
    at::Tensor shared =
        LinearRef(at::silu(LinearRef(x, l.w_gate, l.packed[kWGate])) *
                      LinearRef(x, l.w_up, l.packed[kWUp]),
                  l.w_down, l.packed[kWDown]);
    if (l.shared_gate.defined()) shared = shared * at::sigmoid(at::matmul(x, l.shared_gate)).unsqueeze(1);
    out = out + shared;
  }
  return out.view(hn.sizes());
}

void Model::MoeRows(const Layer& l, const float* hn, int64_t rows, float* out,
                    float beta) const {
  const int64_t dim = config_.dim, k = config_.experts_used, e_count = config_.experts;
  const int64_t f = config_.expert_hidden, shared = config_.shared_expert_hidden;
  StepWorkspace& w = workspace_;
  const int64_t widest = std::max({dim, f, shared, e_count});
  float* scratch = Grow(w.moe_linear, rows * widest);  // not w.linear: the caller holds it
  // y (n, out) = in (n, in_width) W^T (+ beta y), W a tensor or packed.
  auto linear = [&](const float* in, int64_t n, int64_t in_width, const at::Tensor& dense,
                    const Packed& packed, int64_t out_width, float* y, float b) {
    if (packed != nullptr) {
      weights::PackedLinear(in, n, *packed, y, b, w.packed);
    } else {
      Linear(in, n, in_width, dense.data_ptr<float>(), out_width, y, b, scratch);
    }
  };
  float* logits = Grow(w.router, rows * e_count);
  linear(hn, rows, dim, l.router, l.packed[kRouter], e_count, logits, 0.0f);
  std::vector<int32_t> experts(size_t(rows * k));
  std::vector<float> weights(size_t(rows * k));
  for (int64_t i = 0; i < rows; ++i) {
    Route(l, logits + i * e_count, experts.data() + i * k, weights.data() + i * k);
  }
  if (beta == 0.0f) {
    std::fill(out, out + rows * dim, 0.0f);
  } else if (beta != 1.0f) {
    for (int64_t i = 0; i < rows * dim; ++i) out[i] *= beta;
  }
  // Rows by expert (a counting sort): expert e's rows are by_expert[start[e], start[e+1]).
  std::vector<int64_t> start(size_t(e_count) + 1, 0);
  for (int32_t e : experts) ++start[size_t(e) + 1];
  for (int64_t e = 0; e < e_count; ++e) start[e + 1] += start[e];
  std::vector<int64_t> by_expert(size_t(rows * k)), fill(start.begin(), start.end() - 1);
  for (int64_t i = 0; i < rows * k; ++i) by_expert[size_t(fill[experts[size_t(i)]]++)] = i;
  float* in = Grow(w.moe_in, rows * dim);
  float* gate = Grow(w.moe_gate, rows * std::max(f, shared));
  float* up = Grow(w.moe_up, rows * std::max(f, shared));
  float* y = Grow(w.moe_out, rows * dim);
  for (int64_t e = 0; e < e_count; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    const int64_t* slots = by_expert.data() + start[e];
    for (int64_t j = 0; j < n; ++j) {
      std::memcpy(in + j * dim, hn + (slots[j] / k) * dim, dim * sizeof(float));
    }
    const Expert& ex = l.experts[size_t(e)];
    linear(in, n, dim, ex.gate, ex.gate_packed, f, gate, 0.0f);
    linear(in, n, dim, ex.up, ex.up_packed, f, up, 0.0f);
    SiluMul(gate, up, n * f);
    linear(gate, n, f, ex.down, ex.down_packed, dim, y, 0.0f);
    for (int64_t j = 0; j < n; ++j) {
      const float wj = weights[size_t(slots[j])];
      float* o = out + (slots[j] / k) * dim;
      const float* yj = y + j * dim;
      for (int64_t c = 0; c < dim; ++c) o[c] += wj * yj[c];
    }
  }
  if (shared == 0) return;
  linear(hn, rows, dim, l.w_gate, l.packed[kWGate], shared, gate, 0.0f);
  linear(hn, rows, dim, l.w_up, l.packed[kWUp], shared, up, 0.0f);
  SiluMul(gate, up, rows * shared);
  if (!l.shared_gate.defined()) {
    linear(gate, rows, shared, l.w_down, l.packed[kWDown], dim, out, 1.0f);
    return;
  }
  linear(gate, rows, shared, l.w_down, l.packed[kWDown], dim, y, 0.0f);
  const float* g = l.shared_gate.data_ptr<float>();
  for (int64_t i = 0; i < rows; ++i) {
    double dot = 0;
    for (int64_t c = 0; c < dim; ++c) dot += double(hn[i * dim + c]) * g[c];
    const float s = float(1.0 / (1.0 + std::exp(-dot)));
    for (int64_t c = 0; c < dim; ++c) out[i * dim + c] += s * y[i * dim + c];
  }
}

}  // namespace attnserve::model
