#include "server/attention/kv_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "server/attention/kv_kernels.h"

namespace attnserve::attention {

class KvState : public AttentionState {
 public:
  KvState(at::Tensor k, at::Tensor v, int64_t length)
      : k(std::move(k)), v(std::move(v)), length(length) {}

  int64_t Position() const override { return length; }
  int64_t Bytes() const override { return k.nbytes() + v.nbytes(); }
  std::unique_ptr<AttentionState> Clone() const override {
    // Capacity exactly the used length, so a copy holds what its nominal size says.
    return std::make_unique<KvState>(Keys().contiguous().clone(), Values().contiguous().clone(),
                                     length);
  }
  NamedTensors Tensors() const override { return {{"k", Keys()}, {"v", Values()}}; }

  std::unique_ptr<AttentionState> Checkpoint() const override {
    return std::make_unique<KvState>(k, v, length);  // shares storage; no copy
  }
  int64_t BytesAfter(int64_t extra) const override {
    const int64_t per_token = (k.size(0) * k.size(2) + v.size(0) * v.size(2)) *
                              int64_t(k.element_size());
    return CapacityFor(extra) * per_token;
  }

  // Tokens of capacity after making room for `extra` more: doubling when it runs out.
  int64_t CapacityFor(int64_t extra) const {
    const int64_t need = length + extra;
    if (need <= k.size(1)) return k.size(1);
    return std::max<int64_t>({need, 2 * k.size(1), 16});
  }

  // Makes room for `extra` more tokens (CapacityFor).
  void Reserve(int64_t extra) {
    const int64_t cap = CapacityFor(extra);
    if (cap == k.size(1)) return;
    at::Tensor nk = at::empty({k.size(0), cap, k.size(2)}, k.options());
    at::Tensor nv = at::empty({v.size(0), cap, v.size(2)}, v.options());
    nk.narrow(1, 0, length).copy_(k.narrow(1, 0, length));
    nv.narrow(1, 0, length).copy_(v.narrow(1, 0, length));
    k = std::move(nk);
    v = std::move(nv);
  }

  // k: (H, T, D), v: (H, T, Dv) appended at [length, length + T).
  void Append(const at::Tensor& new_k, const at::Tensor& new_v) {
    Reserve(new_k.size(1));
    k.narrow(1, length, new_k.size(1)).copy_(new_k);
    v.narrow(1, length, new_v.size(1)).copy_(new_v);
    length += new_k.size(1);
  }

  at::Tensor Keys() const { return k.narrow(1, 0, length); }    // (H, L, D)
  at::Tensor Values() const { return v.narrow(1, 0, length); }  // (H, L, Dv)

  at::Tensor k;  // (H, capacity, D)
  at::Tensor v;  // (H, capacity, Dv)
  int64_t length;
};

namespace {

KvState& AsKvState(AttentionState& state) {
  auto* s = dynamic_cast<KvState*>(&state);
  TORCH_CHECK(s != nullptr, "attention state does not belong to a KV-cache module");
  return *s;
}

}  // namespace

KvAttention::KvAttention(AttentionOptions options, Normaliser normaliser)
    : Attention(std::move(options)), normaliser_(normaliser) {}

at::Tensor KvAttention::Attend(const at::Tensor& scores, const at::Tensor& allowed,
                               const at::Tensor& values) const {
  at::Tensor masked =
      scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
  if (normaliser_ == Normaliser::kSum) return at::matmul(at::softmax(masked, -1), values);
  // exp(s - rowmax): the shift cancels in the L2 norm and keeps exp in range.
  at::Tensor weights = at::exp(masked - std::get<0>(masked.max(-1, /*keepdim=*/true)));
  return Normalise(normaliser_, at::matmul(weights, values), at::Tensor());
}

at::Tensor KvAttention::Parallel(const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) const {
  auto [qs, ks] = ScaleQK(q, k);
  const int64_t t = q.size(2);
  at::Tensor allowed = at::ones({t, t}, q.options().dtype(at::kBool)).tril();  // (T, T)
  return Attend(at::matmul(qs, ks.transpose(-1, -2)), allowed, v);  // (B, H, T, Dv)
}

std::unique_ptr<AttentionState> KvAttention::NewState() const {
  const auto& o = options();
  return std::make_unique<KvState>(at::empty({o.num_heads, 0, o.head_dim}, at::kFloat),
                                   at::empty({o.num_heads, 0, o.value_dim}, at::kFloat),
                                   0);
}

TensorShapes KvAttention::StateShapes(int64_t position) const {
  const auto& o = options();
  return {{"k", {o.num_heads, position, o.head_dim}}, {"v", {o.num_heads, position, o.value_dim}}};
}

std::unique_ptr<AttentionState> KvAttention::RestoreState(int64_t position,
                                                          const NamedTensors& tensors) const {
  const TensorShapes shapes = StateShapes(position);
  TORCH_CHECK(tensors.size() == 2, "RestoreState: ", tensors.size(), " tensors for a KV state");
  for (size_t i = 0; i < 2; ++i) {
    TORCH_CHECK(tensors[i].first == shapes[i].first &&
                    tensors[i].second.sizes() == at::IntArrayRef(shapes[i].second),
                "RestoreState: tensor ", i, " is not ", shapes[i].first);
  }
  // Capacity exactly the used length; the next append doubles it as usual.
  return std::make_unique<KvState>(
      tensors[0].second.to(at::kFloat).contiguous(),
      tensors[1].second.to(at::kFloat).contiguous(), position);
}

at::Tensor KvAttention::Prefill(AttentionState& state, const at::Tensor& q,
                                const at::Tensor& k, const at::Tensor& v) const {
  KvState& st = AsKvState(state);
  auto [qs, ks] = ScaleQK(q, k);
  const int64_t t = q.size(1);
  const int64_t chunk = options().chunk_size;
  st.Reserve(t);
  std::vector<at::Tensor> outs;
  for (int64_t start = 0; start < t; start += chunk) {
    const int64_t len = std::min(chunk, t - start);
    const int64_t before = st.length;
    st.Append(ks.narrow(1, start, len), v.narrow(1, start, len));
    // Query i of the chunk sits at position before + i and sees keys 0..before + i.
    at::Tensor qi = at::arange(len, q.options().dtype(at::kLong)).unsqueeze(1);
    at::Tensor kj = at::arange(st.length, q.options().dtype(at::kLong)).unsqueeze(0);
    at::Tensor allowed = kj <= qi + before;  // (C, L)
    at::Tensor scores = at::matmul(qs.narrow(1, start, len), st.Keys().transpose(1, 2));
    outs.push_back(Attend(scores, allowed, st.Values()));  // (H, C, Dv)
  }
  if (outs.empty()) return at::empty({q.size(0), 0, v.size(2)}, v.options());
  return outs.size() == 1 ? outs[0] : at::cat(outs, 1);
}

at::Tensor KvAttention::Step(absl::Span<AttentionState* const> states, const at::Tensor& q,
                             const at::Tensor& k, const at::Tensor& v) const {
  TORCH_CHECK(int64_t(states.size()) == q.size(0), "Step: ", states.size(),
              " states for a batch of ", q.size(0));
  auto [qs, ks] = ScaleQK(q, k);
  // Caches have different lengths, so each session attends over its own: (H, 1, L).
  std::vector<at::Tensor> outs;
  outs.reserve(states.size());
  at::Tensor all = at::ones({1, 1}, q.options().dtype(at::kBool));
  for (size_t b = 0; b < states.size(); ++b) {
    KvState& st = AsKvState(*states[b]);
    st.Append(ks[b].unsqueeze(1), v[b].unsqueeze(1));
    at::Tensor scores = at::matmul(qs[b].unsqueeze(1), st.Keys().transpose(1, 2));
    outs.push_back(Attend(scores, all, st.Values()).squeeze(1));  // (H, Dv)
  }
  return at::stack(outs, 0);  // (B, H, Dv)
}

void KvAttention::StepRaw(absl::Span<AttentionState* const> states, float* q, float* k,
                          const float* v, float* out, float*) const {
  // Step without tensors: append each session's k, v to its cache (growing it by doubling
  // when full), then per head two sgemv over the cache and one pass of exp
  // (kv_kernels.h); normalise by the weight sum (softmax) or the L2 norm (softmax_norm).
  const auto& o = options();
  const int64_t b = int64_t(states.size()), h = o.num_heads, d = o.head_dim;
  const int64_t dv = o.value_dim;
  ScaleQKInPlace(q, k, b * h);
  int64_t longest = 0;
  for (AttentionState* s : states) longest = std::max(longest, s->Position() + 1);
  std::vector<float> scores(longest);
  for (int64_t i = 0; i < b; ++i) {
    KvState& st = AsKvState(*states[i]);
    st.Reserve(1);
    const int64_t cap = st.k.size(1), pos = st.length;
    float* kc = st.k.data_ptr<float>();  // (H, cap, D)
    float* vc = st.v.data_ptr<float>();  // (H, cap, Dv)
    for (int64_t hh = 0; hh < h; ++hh) {
      std::copy_n(k + (i * h + hh) * d, d, kc + (hh * cap + pos) * d);
      std::copy_n(v + (i * h + hh) * dv, dv, vc + (hh * cap + pos) * dv);
    }
    st.length += 1;
    for (int64_t hh = 0; hh < h; ++hh) {
      float* row = out + (i * h + hh) * dv;
      const float sum = KvHeadAttend(q + (i * h + hh) * d, kc + hh * cap * d,
                                     vc + hh * cap * dv, st.length, d, dv, scores.data(), row);
      float scale = 1.0f / sum;
      if (normaliser_ == Normaliser::kL2) {
        float ss = 0;
        for (int64_t c = 0; c < dv; ++c) ss += row[c] * row[c];
        scale = 1.0f / std::max(std::sqrt(ss), 1e-30f);
      }
      for (int64_t c = 0; c < dv; ++c) row[c] *= scale;
    }
  }
}

void KvAttention::PrefillRaw(AttentionState& state, int64_t t, float* q, float* k,
                             const float* v, float* out, float*) const {
  // Prefill without tensors: append the t keys and values to the cache (one reserve), then
  // per block of queries and per head one kernel call over the keys they may see
  // (kv_kernels.h); normalise as StepRaw does. KvFlashAttend never stores the scores, so
  // its blocks are large (it reads the cache once per block); KvBlockAttend's blocks are
  // the option's chunks, which bound its score scratch.
  KvState& st = AsKvState(state);
  const auto& o = options();
  const int64_t h = o.num_heads, d = o.head_dim, dv = o.value_dim;
  const bool flash = KvFlashSupported(d, dv);
  constexpr int64_t kFlashBlock = 512;
  const int64_t block = flash ? kFlashBlock : o.chunk_size;
  ScaleQKInPlace(q, k, t * h);
  st.Reserve(t);
  const int64_t cap = st.k.size(1), before = st.length;
  float* kc = st.k.data_ptr<float>();  // (H, cap, D)
  float* vc = st.v.data_ptr<float>();  // (H, cap, Dv)
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t hh = 0; hh < h; ++hh) {
      std::copy_n(k + (i * h + hh) * d, d, kc + (hh * cap + before + i) * d);
      std::copy_n(v + (i * h + hh) * dv, dv, vc + (hh * cap + before + i) * dv);
    }
  }
  st.length += t;
  const int64_t c_max = std::min(t, block);
  std::vector<float> scores(flash ? 0 : c_max * (before + t)), sums(c_max);  // (C, L), (C)
  for (int64_t start = 0; start < t; start += block) {
    const int64_t len = std::min(block, t - start);
    for (int64_t hh = 0; hh < h; ++hh) {
      const float* qh = q + (start * h + hh) * d;  // rows of head hh, stride H * D
      float* oh = out + (start * h + hh) * dv;     // rows of head hh, stride H * Dv
      if (flash) {
        KvFlashAttend(qh, h * d, kc + hh * cap * d, vc + hh * cap * dv, before + start, len, d,
                      dv, oh, h * dv, sums.data());
      } else {
        KvBlockAttend(qh, h * d, kc + hh * cap * d, vc + hh * cap * dv, before + start, len, d,
                      dv, scores.data(), oh, h * dv, sums.data());
      }
      for (int64_t i = 0; i < len; ++i) {
        float* row = oh + i * h * dv;
        float scale = 1.0f / sums[i];
        if (normaliser_ == Normaliser::kL2) {
          float ss = 0;
          for (int64_t c = 0; c < dv; ++c) ss += row[c] * row[c];
          scale = 1.0f / std::max(std::sqrt(ss), 1e-30f);
        }
        for (int64_t c = 0; c < dv; ++c) row[c] *= scale;
      }
    }
  }
}

}  // namespace attnserve::attention
