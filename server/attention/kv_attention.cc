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

  // k: (Hkv, T, D), v: (Hkv, T, Dv) appended at [length, length + T).
  void Append(const at::Tensor& new_k, const at::Tensor& new_v) {
    Reserve(new_k.size(1));
    k.narrow(1, length, new_k.size(1)).copy_(new_k);
    v.narrow(1, length, new_v.size(1)).copy_(new_v);
    length += new_k.size(1);
  }

  at::Tensor Keys() const { return k.narrow(1, 0, length); }    // (Hkv, L, D)
  at::Tensor Values() const { return v.narrow(1, 0, length); }  // (Hkv, L, Dv)

  at::Tensor k;  // (Hkv, capacity, D): KV heads only, never repeated per query head
  at::Tensor v;  // (Hkv, capacity, Dv)
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
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hkv = k.size(1);
  at::Tensor allowed = at::ones({t, t}, q.options().dtype(at::kBool)).tril();  // (T, T)
  // Queries by group (B, Hkv, G, T, D) against their KV head's keys (B, Hkv, 1, D, T).
  at::Tensor qg = qs.reshape({b, hkv, group(), t, q.size(3)});
  at::Tensor scores = at::matmul(qg, ks.unsqueeze(2).transpose(-1, -2));  // (B,Hkv,G,T,T)
  return Attend(scores, allowed, v.unsqueeze(2)).reshape({b, h, t, v.size(3)});  // (B,H,T,Dv)
}

std::unique_ptr<AttentionState> KvAttention::NewState() const {
  const auto& o = options();
  return std::make_unique<KvState>(at::empty({o.num_kv_heads, 0, o.head_dim}, at::kFloat),
                                   at::empty({o.num_kv_heads, 0, o.value_dim}, at::kFloat),
                                   0);
}

TensorShapes KvAttention::StateShapes(int64_t position) const {
  const auto& o = options();
  return {{"k", {o.num_kv_heads, position, o.head_dim}},
          {"v", {o.num_kv_heads, position, o.value_dim}}};
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
  const int64_t t = q.size(1), hkv = k.size(0), g = group();
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
    // Queries by group (Hkv, G, C, D) against their KV head's cache (Hkv, 1, D, L).
    at::Tensor qg = qs.narrow(1, start, len).reshape({hkv, g, len, q.size(2)});
    at::Tensor scores = at::matmul(qg, st.Keys().unsqueeze(1).transpose(-1, -2));
    outs.push_back(Attend(scores, allowed, st.Values().unsqueeze(1))
                       .reshape({hkv * g, len, v.size(2)}));  // (H, C, Dv)
  }
  if (outs.empty()) return at::empty({q.size(0), 0, v.size(2)}, v.options());
  return outs.size() == 1 ? outs[0] : at::cat(outs, 1);
}

at::Tensor KvAttention::Step(absl::Span<AttentionState* const> states, const at::Tensor& q,
                             const at::Tensor& k, const at::Tensor& v) const {
  TORCH_CHECK(int64_t(states.size()) == q.size(0), "Step: ", states.size(),
              " states for a batch of ", q.size(0));
  auto [qs, ks] = ScaleQK(q, k);
  const int64_t hkv = k.size(1), g = group();
  // Caches have different lengths, so each session attends over its own: the G query
  // heads of a KV head against its cache, (Hkv, G, L).
  std::vector<at::Tensor> outs;
  outs.reserve(states.size());
  at::Tensor all = at::ones({1, 1}, q.options().dtype(at::kBool));
  for (size_t b = 0; b < states.size(); ++b) {
    KvState& st = AsKvState(*states[b]);
    st.Append(ks[b].unsqueeze(1), v[b].unsqueeze(1));
    at::Tensor qg = qs[b].reshape({hkv, g, q.size(2)});                // (Hkv, G, D)
    at::Tensor scores = at::matmul(qg, st.Keys().transpose(1, 2));     // (Hkv, G, L)
    outs.push_back(Attend(scores, all, st.Values()).reshape({hkv * g, v.size(2)}));  // (H, Dv)
  }
  return at::stack(outs, 0);  // (B, H, Dv)
}

void KvAttention::StepRaw(absl::Span<AttentionState* const> states, float* q, float* k,
                          const float* v, float* out, float*) const {
  // Step without tensors: append each session's k, v (Hkv heads) to its cache (growing it
  // by doubling when full), then per KV head one pass over its cache for the G query
  // heads of its group (KvGroupAttend: two sgemv for G = 1, two sgemm otherwise, and
  // ExpShifted); normalise by the weight sum (softmax) or the L2 norm (softmax_norm).
  const auto& o = options();
  const int64_t b = int64_t(states.size()), h = o.num_heads, hkv = o.num_kv_heads;
  const int64_t g = group(), d = o.head_dim, dv = o.value_dim;
  ScaleQKInPlace(q, b * h, k, b * hkv);
  int64_t longest = 0;
  for (AttentionState* s : states) longest = std::max(longest, s->Position() + 1);
  std::vector<float> scores(g * longest), sums(g);  // (G, L), (G)
  for (int64_t i = 0; i < b; ++i) {
    KvState& st = AsKvState(*states[i]);
    st.Reserve(1);
    const int64_t cap = st.k.size(1), pos = st.length;
    float* kc = st.k.data_ptr<float>();  // (Hkv, cap, D)
    float* vc = st.v.data_ptr<float>();  // (Hkv, cap, Dv)
    for (int64_t j = 0; j < hkv; ++j) {
      std::copy_n(k + (i * hkv + j) * d, d, kc + (j * cap + pos) * d);
      std::copy_n(v + (i * hkv + j) * dv, dv, vc + (j * cap + pos) * dv);
    }
    st.length += 1;
    for (int64_t j = 0; j < hkv; ++j) {
      float* rows = out + (i * h + j * g) * dv;  // (G, Dv): the group's query heads
      KvGroupAttend(q + (i * h + j * g) * d, kc + j * cap * d, vc + j * cap * dv, g,
                    st.length, d, dv, scores.data(), rows, sums.data());
      for (int64_t r = 0; r < g; ++r) {
        float* row = rows + r * dv;
        float scale = 1.0f / sums[r];
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

void KvAttention::PrefillRaw(AttentionState& state, int64_t t, float* q, float* k,
                             const float* v, float* out, float*) const {
  // Prefill without tensors: append the t keys and values (Hkv heads) to the cache (one
  // reserve), then per block of queries and per query head one kernel call over the keys
  // of its KV head that they may see (kv_kernels.h); normalise as StepRaw does.
  // KvFlashAttend never stores the scores, so its blocks are large (it reads the cache
  // once per block); KvBlockAttend's blocks are the option's chunks, which bound its
  // score scratch.
  KvState& st = AsKvState(state);
  const auto& o = options();
  const int64_t h = o.num_heads, hkv = o.num_kv_heads, g = group();
  const int64_t d = o.head_dim, dv = o.value_dim;
  const bool flash = KvFlashSupported(d, dv);
  constexpr int64_t kFlashBlock = 512;
  const int64_t block = flash ? kFlashBlock : o.chunk_size;
  ScaleQKInPlace(q, t * h, k, t * hkv);
  st.Reserve(t);
  const int64_t cap = st.k.size(1), before = st.length;
  float* kc = st.k.data_ptr<float>();  // (Hkv, cap, D)
  float* vc = st.v.data_ptr<float>();  // (Hkv, cap, Dv)
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < hkv; ++j) {
      std::copy_n(k + (i * hkv + j) * d, d, kc + (j * cap + before + i) * d);
      std::copy_n(v + (i * hkv + j) * dv, dv, vc + (j * cap + before + i) * dv);
    }
  }
  st.length += t;
  const int64_t c_max = std::min(t, block);
  std::vector<float> scores(flash ? 0 : c_max * (before + t)), sums(c_max);  // (C, L), (C)
  for (int64_t start = 0; start < t; start += block) {
    const int64_t len = std::min(block, t - start);
    for (int64_t hh = 0; hh < h; ++hh) {
      const int64_t j = hh / g;                    // its KV head
      const float* qh = q + (start * h + hh) * d;  // rows of head hh, stride H * D
      float* oh = out + (start * h + hh) * dv;     // rows of head hh, stride H * Dv
      if (flash) {
        KvFlashAttend(qh, h * d, kc + j * cap * d, vc + j * cap * dv, before + start, len, d,
                      dv, oh, h * dv, sums.data());
      } else {
        KvBlockAttend(qh, h * d, kc + j * cap * d, vc + j * cap * dv, before + start, len, d,
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
