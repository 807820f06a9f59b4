#include "server/attention/feature_attention.h"

#include <ATen/ATen.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/attention/feature_kernels.h"
#include "server/attention/taylor_features.h"

namespace attnserve::attention {

// A state in a slot of its module's pool: s (Hkv, m, Dv), then z (Hkv, m) under the sum
// normaliser (one state per KV head), fp32 or bf16 as the pool's elements are
// (AttentionOptions::state_bf16). s and z are views of the slot; each holds the slot too,
// so a view that outlives the state (Tensors()) stays valid as a tensor's would, and the
// slot goes back to the pool when the state and its last view are gone.
class FeatureState : public AttentionState {
 public:
  // Views `slot` (contents as they are) as a state at `position`.
  FeatureState(std::shared_ptr<StatePool::Slot> slot, int64_t heads, int64_t m, int64_t dv,
               bool has_z, int64_t position)
      : s(View(slot, 0, {heads, m, dv})),
        z(has_z ? View(slot, heads * m * dv, {heads, m}) : at::Tensor()),
        position(position),
        slot_(std::move(slot)) {}

  int64_t Position() const override { return position; }
  int64_t Bytes() const override {
    return s.nbytes() + (z.defined() ? int64_t(z.nbytes()) : 0);
  }
  std::unique_ptr<AttentionState> Clone() const override {
    auto copy = std::make_unique<FeatureState>(slot_->pool().Allocate(), s.size(0),
                                               s.size(1), s.size(2), z.defined(), position);
    std::memcpy(copy->slot_->data(), slot_->data(), Bytes());
    return copy;
  }
  // fp32 views; fp32 copies of a bf16 state (exact: every bf16 is an fp32).
  NamedTensors Tensors() const override {
    if (!z.defined()) return {{"s", s.to(at::kFloat)}};
    return {{"s", s.to(at::kFloat)}, {"z", z.to(at::kFloat)}};
  }
  bool bf16() const { return s.scalar_type() == at::kBFloat16; }
  // The raw elements of a bf16 state (bf16.h's bit patterns).
  uint16_t* s_bf16() const { return reinterpret_cast<uint16_t*>(s.data_ptr()); }
  uint16_t* z_bf16() const {
    return z.defined() ? reinterpret_cast<uint16_t*>(z.data_ptr()) : nullptr;
  }

  at::Tensor s;  // (Hkv, m, Dv) fp32 or bf16, contiguous
  at::Tensor z;  // (Hkv, m) as s, contiguous, after s; undefined under the L2 normaliser
  int64_t position;

 private:
  // `sizes` elements of the slot from element `offset`, of the pool's element type.
  static at::Tensor View(const std::shared_ptr<StatePool::Slot>& slot, int64_t offset,
                         at::IntArrayRef sizes) {
    const int64_t bytes = slot->pool().element_bytes();
    return at::from_blob(static_cast<char*>(slot->data()) + offset * bytes, sizes,
                         [slot](void*) {}, bytes == 2 ? at::kBFloat16 : at::kFloat);
  }

  std::shared_ptr<StatePool::Slot> slot_;
};

namespace {

class TaylorMap : public FeatureMap {
 public:
  TaylorMap(int dim, int order) : map_(dim, order), order_(order) {}
  int64_t size() const override { return map_.size(); }
  at::Tensor Queries(const at::Tensor& q) const override { return map_.Queries(q); }
  at::Tensor Keys(const at::Tensor& k) const override { return map_.Keys(k); }
  at::Tensor Kernel(const at::Tensor& q, const at::Tensor& k) const override {
    return TaylorKernel(at::matmul(q, k.transpose(-1, -2)), order_);
  }
  void QueriesInto(const float* x, int64_t rows, float* out) const override {
    map_.QueriesInto(x, rows, out);
  }
  void KeysInto(const float* x, int64_t rows, float* out) const override {
    map_.KeysInto(x, rows, out);
  }
  bool KernelIsOfDots() const override { return true; }
  void KernelFromDots(float* s, int64_t n) const override { TaylorPolynomial(s, n, order_); }

 private:
  TaylorFeatureMap map_;
  int order_;
};

class EluMap : public FeatureMap {
 public:
  explicit EluMap(int dim) : dim_(dim) {}
  int64_t size() const override { return dim_; }
  at::Tensor Queries(const at::Tensor& q) const override { return at::elu(q) + 1; }
  at::Tensor Keys(const at::Tensor& k) const override { return at::elu(k) + 1; }
  at::Tensor Kernel(const at::Tensor& q, const at::Tensor& k) const override {
    return at::matmul(Queries(q), Keys(k).transpose(-1, -2));
  }
  // elu(x) + 1 = x + 1 for x > 0, exp(x) otherwise.
  void QueriesInto(const float* x, int64_t rows, float* out) const override {
    for (int64_t i = 0; i < rows * dim_; ++i) out[i] = x[i] > 0 ? x[i] + 1.0f : std::exp(x[i]);
  }
  void KeysInto(const float* x, int64_t rows, float* out) const override {
    QueriesInto(x, rows, out);
  }

 private:
  int dim_;
};

// Normalise, row by row (rows of dv floats, `ld` apart): num / den[r] under the sum
// normaliser (den non-null), num / |num| under L2 (den null), as Normalise does.
void NormaliseRows(float* out, int64_t rows, int64_t dv, int64_t ld, const float* den) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = out + r * ld;
    float scale;
    if (den != nullptr) {
      scale = 1.0f / den[r];
    } else {
      float ss = 0;
      for (int64_t c = 0; c < dv; ++c) ss += row[c] * row[c];
      scale = 1.0f / std::max(std::sqrt(ss), 1e-30f);
    }
    for (int64_t c = 0; c < dv; ++c) row[c] *= scale;
  }
}

// Elements of one state: s (Hkv, m, Dv), and z (Hkv, m) under the sum normaliser.
int64_t StateElements(const AttentionOptions& o, int64_t m, Normaliser normaliser) {
  return o.num_kv_heads * m * (o.value_dim + (normaliser == Normaliser::kSum ? 1 : 0));
}

FeatureState& AsFeatureState(AttentionState& state) {
  auto* s = dynamic_cast<FeatureState*>(&state);
  TORCH_CHECK(s != nullptr, "attention state does not belong to a feature-map module");
  return *s;
}

}  // namespace

std::unique_ptr<FeatureMap> MakeTaylorFeatureMap(int dim, int order) {
  return std::make_unique<TaylorMap>(dim, order);
}

std::unique_ptr<FeatureMap> MakeEluFeatureMap(int dim) {
  return std::make_unique<EluMap>(dim);
}

FeatureAttention::FeatureAttention(AttentionOptions options,
                                   std::unique_ptr<FeatureMap> features,
                                   Normaliser normaliser)
    : Attention(std::move(options)),
      features_(std::move(features)),
      normaliser_(normaliser),
      decays_(HeadDecays(this->options())),
      pool_(StatePool::Create(StateElements(this->options(), features_->size(), normaliser_),
                              StateElementBytes(this->options()))) {}

at::Tensor FeatureAttention::DecayMask(int64_t t, const at::TensorOptions& options) const {
  const int64_t h = this->options().num_kv_heads;
  at::Tensor causal = at::ones({t, t}, options).tril();  // (T, T), diagonal included
  if (decays_.empty()) return causal.expand({h, t, t});
  // gamma^(i-j) = exp((i-j) log gamma); above the diagonal the mask zeroes it.
  at::Tensor idx = at::arange(t, options);
  at::Tensor dist = (idx.unsqueeze(1) - idx.unsqueeze(0)).clamp_min(0);   // (T, T)
  at::Tensor log_g = at::tensor(decays_, options).log().view({h, 1, 1});  // (H, 1, 1)
  return at::exp(dist.unsqueeze(0) * log_g) * causal;                     // (H, T, T)
}

at::Tensor FeatureAttention::DecayPowers(int64_t t, int64_t offset,
                                         const at::TensorOptions& options) const {
  const int64_t h = this->options().num_kv_heads;
  if (decays_.empty()) return at::ones({h, t, 1}, options);
  at::Tensor exps = at::arange(offset, offset + t, options);                // (T)
  at::Tensor log_g = at::tensor(decays_, options).log().view({h, 1});     // (H, 1)
  return at::exp(log_g * exps.unsqueeze(0)).unsqueeze(-1);                // (H, T, 1)
}

at::Tensor FeatureAttention::Parallel(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v) const {
  auto [qs, ks] = ScaleQK(q, k);
  const int64_t b = q.size(0), h = q.size(1), t = q.size(2), hkv = k.size(1);
  // Queries by group, (B, Hkv, G, T, D), against their KV head's keys (B, Hkv, 1, T, D).
  at::Tensor qg = qs.reshape({b, hkv, group(), t, q.size(3)});
  // (B, Hkv, G, T, T): kernel values, zero above the diagonal (future tokens), decayed
  // with distance (per KV head) under a decay.
  at::Tensor a = features_->Kernel(qg, ks.unsqueeze(2)) *
                 DecayMask(t, q.options()).unsqueeze(1);
  at::Tensor num = at::matmul(a, v.unsqueeze(2));  // (B, Hkv, G, T, Dv)
  at::Tensor den = normaliser_ == Normaliser::kSum ? a.sum(-1) : at::Tensor();
  return Normalise(normaliser_, num, den).reshape({b, h, t, v.size(3)});  // (B, H, T, Dv)
}

std::unique_ptr<FeatureState> FeatureAttention::StateInNewSlot(int64_t position) const {
  const auto& o = options();
  return std::make_unique<FeatureState>(pool_->Allocate(), o.num_kv_heads, features_->size(),
                                        o.value_dim, normaliser_ == Normaliser::kSum,
                                        position);
}

std::unique_ptr<AttentionState> FeatureAttention::NewState() const {
  std::unique_ptr<FeatureState> st = StateInNewSlot(0);
  st->s.zero_();
  if (st->z.defined()) st->z.zero_();
  return st;
}

TensorShapes FeatureAttention::StateShapes(int64_t) const {
  const auto& o = options();
  const int64_t m = features_->size();
  TensorShapes shapes = {{"s", {o.num_kv_heads, m, o.value_dim}}};
  if (normaliser_ == Normaliser::kSum) shapes.push_back({"z", {o.num_kv_heads, m}});
  return shapes;
}

std::unique_ptr<AttentionState> FeatureAttention::RestoreState(
    int64_t position, const NamedTensors& tensors) const {
  const TensorShapes shapes = StateShapes(position);
  TORCH_CHECK(tensors.size() == shapes.size(), "RestoreState: ", tensors.size(),
              " tensors for a state of ", shapes.size());
  for (size_t i = 0; i < shapes.size(); ++i) {
    TORCH_CHECK(tensors[i].first == shapes[i].first &&
                    tensors[i].second.sizes() == at::IntArrayRef(shapes[i].second),
                "RestoreState: tensor ", i, " is not ", shapes[i].first);
  }
  // Copied into the pool (converting dtype and layout on the way; to a bf16 state with
  // round to nearest even, so the fp32 copies Tensors() gives come back exactly).
  std::unique_ptr<FeatureState> st = StateInNewSlot(position);
  st->s.copy_(tensors[0].second);
  if (st->z.defined()) st->z.copy_(tensors[1].second);
  return st;
}

at::Tensor FeatureAttention::PrefillChunk(FeatureState& st, const at::Tensor& q,
                                          const at::Tensor& k, const at::Tensor& v) const {
  // Intra-chunk: the masked kernel matrix (H, C, C). Inter-chunk: read the state with
  // one product per chunk, then fold the chunk's keys and values into it. Under a decay
  // row i reads the state as it was before the chunk gamma^(i+1) later; key j enters it
  // gamma^(C-1-j) before the chunk's end, when the old state has decayed by gamma^C.
  // The G query heads of a KV head read its state together: (Hkv, G * C, m) @ S.
  // A bf16 state is read into fp32 here and stored back rounded after the chunk (fp32:
  // s and z are the state itself).
  const int64_t c = q.size(1), hkv = k.size(0), g = group(), m = features_->size();
  const int64_t dv = v.size(2);
  const bool sum = normaliser_ == Normaliser::kSum;
  at::Tensor s = st.s.to(at::kFloat);                           // (Hkv, m, Dv)
  at::Tensor z = sum ? st.z.to(at::kFloat) : at::Tensor();     // (Hkv, m)
  at::Tensor qg = q.reshape({hkv, g, c, q.size(2)});  // (Hkv, G, C, D)
  at::Tensor a = features_->Kernel(qg, k.unsqueeze(1)) *
                 DecayMask(c, q.options()).unsqueeze(1);  // (Hkv, G, C, C)
  at::Tensor phi_q = features_->Queries(qg);  // (Hkv, G, C, m)
  at::Tensor phi_k = features_->Keys(k);      // (Hkv, C, m)
  if (!decays_.empty()) {
    phi_q = phi_q * DecayPowers(c, 1, q.options()).unsqueeze(1);  // row i: gamma^(i+1)
    phi_k = phi_k * DecayPowers(c, 0, q.options()).flip(1);       // row j: gamma^(C-1-j)
  }
  at::Tensor pq = phi_q.reshape({hkv, g * c, m});  // (Hkv, G * C, m)
  at::Tensor num = at::matmul(a, v.unsqueeze(1)) +
                   at::bmm(pq, s).view({hkv, g, c, dv});  // (Hkv, G, C, Dv)
  at::Tensor den;
  if (sum) {
    den = a.sum(-1) + at::bmm(pq, z.unsqueeze(-1)).view({hkv, g, c});  // (Hkv, G, C)
  }
  if (!decays_.empty()) {
    at::Tensor g_c = DecayPowers(1, c, q.options());  // (H, 1, 1): gamma^C
    s.mul_(g_c);
    if (sum) z.mul_(g_c.squeeze(-1));
  }
  if (sum) z.add_(phi_k.sum(1));
  s.baddbmm_(phi_k.transpose(1, 2), v);  // += (Hkv, m, C) @ (Hkv, C, Dv)
  if (st.bf16()) {
    st.s.copy_(s);  // round to nearest even
    if (sum) st.z.copy_(z);
  }
  st.position += c;
  return Normalise(normaliser_, num, den).reshape({hkv * g, c, dv});  // (H, C, Dv)
}

at::Tensor FeatureAttention::Prefill(AttentionState& state, const at::Tensor& q,
                                     const at::Tensor& k, const at::Tensor& v) const {
  FeatureState& st = AsFeatureState(state);
  auto [qs, ks] = ScaleQK(q, k);
  const int64_t t = q.size(1);
  const int64_t chunk = options().chunk_size;
  std::vector<at::Tensor> outs;
  for (int64_t start = 0; start < t; start += chunk) {
    const int64_t len = std::min(chunk, t - start);
    outs.push_back(PrefillChunk(st, qs.narrow(1, start, len), ks.narrow(1, start, len),
                                v.narrow(1, start, len)));
  }
  if (outs.empty()) return at::empty({q.size(0), 0, v.size(2)}, v.options());
  return outs.size() == 1 ? outs[0] : at::cat(outs, 1);
}

at::Tensor FeatureAttention::Step(absl::Span<AttentionState* const> states,
                                  const at::Tensor& q, const at::Tensor& k,
                                  const at::Tensor& v) const {
  TORCH_CHECK(int64_t(states.size()) == q.size(0), "Step: ", states.size(),
              " states for a batch of ", q.size(0));
  auto [qs, ks] = ScaleQK(q, k);
  // Features for the whole batch at once: (B, H, m) and (B, Hkv, m).
  at::Tensor phi_q = features_->Queries(qs);
  at::Tensor phi_k = features_->Keys(ks);
  const int64_t hkv = k.size(1), g = group();
  if (!options().reference_kernels) return StepFused(states, phi_q, phi_k, v);
  // Reference: each session's state is its own tensor; update it in place, then read
  // it out. The update comes first so each token attends to itself.
  std::vector<at::Tensor> outs;
  outs.reserve(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    // A bf16 state is read into fp32, updated and read out in fp32, and stored back
    // rounded; an fp32 one is updated in place (s and z are the state).
    FeatureState& st = AsFeatureState(*states[b]);
    const bool sum = normaliser_ == Normaliser::kSum;
    at::Tensor s = st.s.to(at::kFloat);                         // (Hkv, m, Dv)
    at::Tensor z = sum ? st.z.to(at::kFloat) : at::Tensor();   // (Hkv, m)
    at::Tensor pk = phi_k[b];                                   // (Hkv, m)
    at::Tensor pq = phi_q[b].reshape({hkv, g, -1});             // (Hkv, G, m)
    if (!decays_.empty()) {
      at::Tensor gamma = DecayPowers(1, 1, s.options());        // (Hkv, 1, 1)
      s.mul_(gamma);
      if (sum) z.mul_(gamma.squeeze(-1));
    }
    s.baddbmm_(pk.unsqueeze(-1), v[b].unsqueeze(1));            // += (Hkv,m,1)@(Hkv,1,Dv)
    at::Tensor num = at::bmm(pq, s).reshape({hkv * g, -1});     // (H, Dv)
    at::Tensor den;
    if (sum) {
      z.add_(pk);
      den = at::bmm(pq, z.unsqueeze(-1)).reshape({hkv * g});    // (H)
    }
    if (st.bf16()) {
      st.s.copy_(s);  // round to nearest even
      if (sum) st.z.copy_(z);
    }
    st.position += 1;
    outs.push_back(Normalise(normaliser_, num, den));
  }
  return at::stack(outs, 0);  // (B, H, Dv)
}

void FeatureAttention::UpdateAndRead(FeatureState& st, const float* phi_q, const float* phi_k,
                                     const float* v, float* num, float* den) const {
  const auto& o = options();
  const int64_t m = features_->size();
  if (st.bf16()) {
    StateUpdateAndReadBf16(st.s_bf16(), st.z_bf16(), phi_q, phi_k, v, Decays(),
                           o.num_kv_heads, group(), m, o.value_dim, num, den);
  } else {
    StateUpdateAndRead(st.s.data_ptr<float>(),
                       st.z.defined() ? st.z.data_ptr<float>() : nullptr, phi_q, phi_k, v,
                       Decays(), o.num_kv_heads, group(), m, o.value_dim, num, den);
  }
}

at::Tensor FeatureAttention::StepFused(absl::Span<AttentionState* const> states,
                                       const at::Tensor& phi_q, const at::Tensor& phi_k,
                                       const at::Tensor& v) const {
  // phi_q: (B, H, m); phi_k: (B, Hkv, m); v: (B, Hkv, Dv). One pass over each session's
  // S per KV head, read by the G query heads of its group.
  const int64_t b = phi_q.size(0), h = phi_q.size(1), dv = v.size(2);
  at::Tensor pq = phi_q.contiguous(), pk = phi_k.contiguous(), vc = v.contiguous();
  at::Tensor num = at::empty({b, h, dv}, v.options());
  at::Tensor den = at::empty({b, h}, v.options());
  const bool sum = normaliser_ == Normaliser::kSum;
  for (int64_t i = 0; i < b; ++i) {
    FeatureState& st = AsFeatureState(*states[i]);
    UpdateAndRead(st, pq[i].data_ptr<float>(), pk[i].data_ptr<float>(),
                  vc[i].data_ptr<float>(), num[i].data_ptr<float>(), den[i].data_ptr<float>());
    st.position += 1;
  }
  return Normalise(normaliser_, num, sum ? den : at::Tensor());  // (B, H, Dv)
}

int64_t FeatureAttention::StepScratchFloats(int64_t batch) const {
  const auto& o = options();
  // phi_q (B, H, m), phi_k (B, Hkv, m), den (B, H)
  return batch * ((o.num_heads + o.num_kv_heads) * features_->size() + o.num_heads);
}

void FeatureAttention::StepRaw(absl::Span<AttentionState* const> states, float* q, float* k,
                               const float* v, float* out, float* scratch) const {
  // The same arithmetic as Step + StepFused, without tensors: scale q (B*H rows of D) and
  // k (B*Hkv rows), features (B*H and B*Hkv rows of m), one pass over each session's S
  // (and z) per KV head, read by its G query heads, normalise.
  const auto& o = options();
  const int64_t b = int64_t(states.size()), h = o.num_heads, hkv = o.num_kv_heads;
  const int64_t m = features_->size(), dv = o.value_dim;
  ScaleQKInPlace(q, b * h, k, b * hkv);
  float* phi_q = scratch;             // (B, H, m)
  float* phi_k = phi_q + b * h * m;    // (B, Hkv, m)
  float* den = phi_k + b * hkv * m;    // (B, H)
  features_->QueriesInto(q, b * h, phi_q);
  features_->KeysInto(k, b * hkv, phi_k);
  const bool sum = normaliser_ == Normaliser::kSum;
  for (int64_t i = 0; i < b; ++i) {
    FeatureState& st = AsFeatureState(*states[i]);
    UpdateAndRead(st, phi_q + i * h * m, phi_k + i * hkv * m, v + i * hkv * dv,
                  out + i * h * dv, den + i * h);
    st.position += 1;
  }
  NormaliseRows(out, b * h, dv, dv, sum ? den : nullptr);
}

int64_t FeatureAttention::PrefillScratchFloats(int64_t t) const {
  const auto& o = options();
  const int64_t c = std::min<int64_t>(t, o.chunk_size), m = features_->size();
  // phi_q (C, H, m), phi_k (C, Hkv, m), A, den, phi_q . z, gamma^0..gamma^C, gamma^(C-1-j)
  // and, for a bf16 state, one KV head's S and z in fp32.
  const int64_t state = o.state_bf16 ? m * (o.value_dim + 1) : 0;
  return c * (o.num_heads + o.num_kv_heads) * m + c * c + 2 * c + (c + 1) + c + state;
}

void FeatureAttention::PrefillRaw(AttentionState& state, int64_t t, float* q, float* k,
                                  const float* v, float* out, float* scratch) const {
  // PrefillChunk without tensors, per chunk of C tokens, per KV head j and per query head
  // h of its group (row strides of the (t, H, .) and (t, Hkv, .) buffers: H*D, Hkv*D,
  // H*m, Hkv*m, Hkv*Dv, H*Dv):
  //   A   = K(q_h, k_j) masked to j' <= i       (C, C): sgemm, then the kernel in place
  //   num = A v_j + phi_q_h S_j                 (C, Dv): two sgemm into out
  //   den = rowsum(A) + phi_q_h z_j             (C)
  //   S_j += phi_k_j^T v_j, z_j += colsum(phi_k_j)   (after the group's reads: causal)
  // Under a decay (gamma = gamma_j), as PrefillChunk: A[i][j'] *= gamma^(i-j'); phi_q row
  // i *= gamma^(i+1) before the read; S_j, z_j *= gamma^C and phi_k row j' *=
  // gamma^(C-1-j') before the update. A bf16 state: S_j and z_j are read into fp32
  // before the group's reads and stored back rounded after the update, once per chunk.
  FeatureState& st = AsFeatureState(state);
  const auto& o = options();
  const int64_t h = o.num_heads, hkv = o.num_kv_heads, g = group();
  const int64_t d = o.head_dim, dv = o.value_dim, m = features_->size();
  const int64_t chunk = o.chunk_size;
  const bool sum = normaliser_ == Normaliser::kSum;
  ScaleQKInPlace(q, t * h, k, t * hkv);
  const int64_t c_max = std::min(t, chunk);
  float* phi_q = scratch;                  // (C, H, m)
  float* phi_k = phi_q + c_max * h * m;    // (C, Hkv, m)
  float* a = phi_k + c_max * hkv * m;      // (C, C)
  float* den = a + c_max * c_max;          // (C)
  float* zden = den + c_max;               // (C)
  float* powers = zden + c_max;            // (C + 1): gamma^0 .. gamma^C
  float* rev = powers + c_max + 1;         // (C): gamma^(len-1-j)
  const bool bf16 = st.bf16();
  float* s32 = rev + c_max;                // bf16: (m, Dv) S_j in fp32
  float* z32 = s32 + m * dv;               // bf16: (m) z_j in fp32
  float* s_all = bf16 ? nullptr : st.s.data_ptr<float>();  // (Hkv, m, Dv)
  float* z_all = sum && !bf16 ? st.z.data_ptr<float>() : nullptr;  // (Hkv, m)
  const int ldq = int(h * d), ldk = int(hkv * d), ldv = int(hkv * dv), ldo = int(h * dv);
  const int ldpq = int(h * m), ldpk = int(hkv * m);
  for (int64_t start = 0; start < t; start += chunk) {
    const int64_t len = std::min(chunk, t - start);
    const int n = int(len);
    const float* qc = q + start * h * d;
    const float* kc = k + start * hkv * d;
    const float* vc = v + start * hkv * dv;
    float* oc = out + start * h * dv;
    features_->QueriesInto(qc, len * h, phi_q);
    features_->KeysInto(kc, len * hkv, phi_k);
    for (int64_t j = 0; j < hkv; ++j) {
      float* pk = phi_k + j * m;  // scaled in place under a decay, after the reads
      const float* kh = kc + j * d;
      const float* vh = vc + j * dv;
      float* sh = bf16 ? s32 : s_all + j * m * dv;
      float* zh = !sum ? nullptr : bf16 ? z32 : z_all + j * m;
      if (bf16) {
        Bf16ToFloats(st.s_bf16() + j * m * dv, m * dv, sh);
        if (sum) Bf16ToFloats(st.z_bf16() + j * m, m, zh);
      }
      if (!decays_.empty()) {
        powers[0] = 1.0f;
        for (int64_t i = 1; i <= len; ++i) powers[i] = powers[i - 1] * decays_[j];
        for (int64_t i = 0; i < len; ++i) rev[i] = powers[len - 1 - i];
      }
      for (int64_t hh = j * g; hh < (j + 1) * g; ++hh) {
        float* pq = phi_q + hh * m;  // scaled in place under a decay
        float* oh = oc + hh * dv;
        // A (len, len): the kernel from q.k where it is a function of it, else
        // phi_q phi_k^T.
        if (features_->KernelIsOfDots()) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(d), 1.0f,
                      qc + hh * d, ldq, kh, ldk, 0.0f, a, n);
          features_->KernelFromDots(a, len * len);
        } else {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(m), 1.0f, pq, ldpq,
                      pk, ldpk, 0.0f, a, n);
        }
        if (!decays_.empty()) {
          for (int64_t i = 0; i < len; ++i) {
            float* row = a + i * len;
            for (int64_t jj = 0; jj <= i; ++jj) row[jj] *= powers[i - jj];
          }
        }
        for (int64_t i = 0; i < len; ++i) {
          std::fill(a + i * len + i + 1, a + (i + 1) * len, 0.0f);
        }
        // num = A v_j + phi_q S_j, straight into out's rows for head hh.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(dv), n, 1.0f, a, n, vh,
                    ldv, 0.0f, oh, ldo);
        if (!decays_.empty()) ScaleRows(pq, len, m, ldpq, powers + 1);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(dv), int(m), 1.0f, pq,
                    ldpq, sh, int(dv), 1.0f, oh, ldo);
        if (sum) {
          RowSums(a, len, len, len, den);
          cblas_sgemv(CblasRowMajor, CblasNoTrans, n, int(m), 1.0f, pq, ldpq, zh, 1, 0.0f,
                      zden, 1);
          for (int64_t i = 0; i < len; ++i) den[i] += zden[i];
        }
        NormaliseRows(oh, len, dv, ldo, sum ? den : nullptr);
      }
      // The group has read S_j as it was before the chunk: fold the chunk in.
      if (!decays_.empty()) {
        ScaleRows(pk, len, m, ldpk, rev);
        cblas_sscal(int(m * dv), powers[len], sh, 1);
        if (sum) cblas_sscal(int(m), powers[len], zh, 1);
      }
      if (sum) AddColumnSums(pk, len, m, ldpk, zh);
      // S_j += phi_k^T v_j: (m, len) (len, Dv).
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(dv), n, 1.0f, pk, ldpk,
                  vh, ldv, 1.0f, sh, int(dv));
      if (bf16) {
        FloatsToBf16(sh, m * dv, st.s_bf16() + j * m * dv);
        if (sum) FloatsToBf16(zh, m, st.z_bf16() + j * m);
      }
    }
  }
  st.position += t;
}

}  // namespace attnserve::attention
