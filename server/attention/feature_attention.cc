#include "server/attention/feature_attention.h"

#include <ATen/ATen.h>
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "server/attention/feature_kernels.h"
#include "server/attention/taylor_features.h"

namespace attnserve::attention {

// A state in a slot of its module's pool: s (H, m, Dv), then z (H, m) under the sum
// normaliser. s and z are views of the slot; each holds the slot too, so a view that
// outlives the state (Tensors()) stays valid as a tensor's would, and the slot goes back
// to the pool when the state and its last view are gone.
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
  NamedTensors Tensors() const override {
    if (!z.defined()) return {{"s", s}};
    return {{"s", s}, {"z", z}};
  }

  at::Tensor s;  // (H, m, Dv) fp32, contiguous
  at::Tensor z;  // (H, m) fp32, contiguous, after s; undefined under the L2 normaliser
  int64_t position;

 private:
  static at::Tensor View(const std::shared_ptr<StatePool::Slot>& slot, int64_t offset,
                         at::IntArrayRef sizes) {
    return at::from_blob(slot->data() + offset, sizes, [slot](void*) {}, at::kFloat);
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

// Floats of one state: s (H, m, Dv), and z (H, m) under the sum normaliser.
int64_t StateFloats(const AttentionOptions& o, int64_t m, Normaliser normaliser) {
  return o.num_heads * m * (o.value_dim + (normaliser == Normaliser::kSum ? 1 : 0));
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
      pool_(StatePool::Create(StateFloats(this->options(), features_->size(), normaliser_))) {}

at::Tensor FeatureAttention::DecayMask(int64_t t, const at::TensorOptions& options) const {
  const int64_t h = this->options().num_heads;
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
  const int64_t h = this->options().num_heads;
  if (decays_.empty()) return at::ones({h, t, 1}, options);
  at::Tensor exps = at::arange(offset, offset + t, options);                // (T)
  at::Tensor log_g = at::tensor(decays_, options).log().view({h, 1});     // (H, 1)
  return at::exp(log_g * exps.unsqueeze(0)).unsqueeze(-1);                // (H, T, 1)
}

at::Tensor FeatureAttention::Parallel(const at::Tensor& q, const at::Tensor& k,
                                      const at::Tensor& v) const {
  auto [qs, ks] = ScaleQK(q, k);
  // (B, H, T, T): kernel values, zero above the diagonal (future tokens), decayed
  // with distance under a decay.
  at::Tensor a = features_->Kernel(qs, ks) * DecayMask(q.size(2), q.options());
  at::Tensor num = at::matmul(a, v);  // (B, H, T, Dv)
  at::Tensor den = normaliser_ == Normaliser::kSum ? a.sum(-1) : at::Tensor();
  return Normalise(normaliser_, num, den);
}

std::unique_ptr<FeatureState> FeatureAttention::StateInNewSlot(int64_t position) const {
  const auto& o = options();
  return std::make_unique<FeatureState>(pool_->Allocate(), o.num_heads, features_->size(),
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
  TensorShapes shapes = {{"s", {o.num_heads, m, o.value_dim}}};
  if (normaliser_ == Normaliser::kSum) shapes.push_back({"z", {o.num_heads, m}});
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
  // Copied into the pool (converting dtype and layout on the way).
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
  const int64_t c = q.size(1);
  const bool sum = normaliser_ == Normaliser::kSum;
  at::Tensor a = features_->Kernel(q, k) * DecayMask(c, q.options());
  at::Tensor phi_q = features_->Queries(q);  // (H, C, m)
  at::Tensor phi_k = features_->Keys(k);     // (H, C, m)
  if (!decays_.empty()) {
    phi_q = phi_q * DecayPowers(c, 1, q.options());          // row i: gamma^(i+1)
    phi_k = phi_k * DecayPowers(c, 0, q.options()).flip(1);  // row j: gamma^(C-1-j)
  }
  at::Tensor num = at::matmul(a, v) + at::bmm(phi_q, st.s);  // (H, C, Dv)
  at::Tensor den;
  if (sum) den = a.sum(-1) + at::matmul(phi_q, st.z.unsqueeze(-1)).squeeze(-1);  // (H, C)
  if (!decays_.empty()) {
    at::Tensor g_c = DecayPowers(1, c, q.options());  // (H, 1, 1): gamma^C
    st.s.mul_(g_c);
    if (sum) st.z.mul_(g_c.squeeze(-1));
  }
  if (sum) st.z.add_(phi_k.sum(1));
  st.s.baddbmm_(phi_k.transpose(1, 2), v);  // += (H, m, C) @ (H, C, Dv)
  st.position += q.size(1);
  return Normalise(normaliser_, num, den);
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
  // Features for the whole batch at once: (B, H, m).
  at::Tensor phi_q = features_->Queries(qs);
  at::Tensor phi_k = features_->Keys(ks);
  if (!options().reference_kernels) return StepFused(states, phi_q, phi_k, v);
  // Reference: each session's state is its own tensor; update it in place, then read
  // it out. The update comes first so each token attends to itself.
  std::vector<at::Tensor> outs;
  outs.reserve(states.size());
  for (size_t b = 0; b < states.size(); ++b) {
    FeatureState& st = AsFeatureState(*states[b]);
    at::Tensor pk = phi_k[b];                                   // (H, m)
    at::Tensor pq = phi_q[b].unsqueeze(1);                      // (H, 1, m)
    if (!decays_.empty()) {
      at::Tensor g = DecayPowers(1, 1, st.s.options());         // (H, 1, 1)
      st.s.mul_(g);
      if (normaliser_ == Normaliser::kSum) st.z.mul_(g.squeeze(-1));
    }
    st.s.baddbmm_(pk.unsqueeze(-1), v[b].unsqueeze(1));         // += (H,m,1)@(H,1,Dv)
    at::Tensor num = at::bmm(pq, st.s).squeeze(1);              // (H, Dv)
    at::Tensor den;
    if (normaliser_ == Normaliser::kSum) {
      st.z.add_(pk);
      den = at::bmm(pq, st.z.unsqueeze(-1)).squeeze(-1).squeeze(-1);  // (H)
    }
    st.position += 1;
    outs.push_back(Normalise(normaliser_, num, den));
  }
  return at::stack(outs, 0);  // (B, H, Dv)
}

at::Tensor FeatureAttention::StepFused(absl::Span<AttentionState* const> states,
                                       const at::Tensor& phi_q, const at::Tensor& phi_k,
                                       const at::Tensor& v) const {
  // phi_q, phi_k: (B, H, m); v: (B, H, Dv). One pass over each session's S.
  const int64_t b = phi_q.size(0), h = phi_q.size(1), m = phi_q.size(2), dv = v.size(2);
  at::Tensor pq = phi_q.contiguous(), pk = phi_k.contiguous(), vc = v.contiguous();
  at::Tensor num = at::empty({b, h, dv}, v.options());
  at::Tensor den = at::empty({b, h}, v.options());
  const bool sum = normaliser_ == Normaliser::kSum;
  for (int64_t i = 0; i < b; ++i) {
    FeatureState& st = AsFeatureState(*states[i]);
    StateUpdateAndRead(st.s.data_ptr<float>(), sum ? st.z.data_ptr<float>() : nullptr,
                       pq[i].data_ptr<float>(), pk[i].data_ptr<float>(),
                       vc[i].data_ptr<float>(), Decays(), h, m, dv, num[i].data_ptr<float>(),
                       den[i].data_ptr<float>());
    st.position += 1;
  }
  return Normalise(normaliser_, num, sum ? den : at::Tensor());  // (B, H, Dv)
}

int64_t FeatureAttention::StepScratchFloats(int64_t batch) const {
  const auto& o = options();
  return batch * o.num_heads * (2 * features_->size() + 1);  // phi_q, phi_k, den
}

void FeatureAttention::StepRaw(absl::Span<AttentionState* const> states, float* q, float* k,
                               const float* v, float* out, float* scratch) const {
  // The same arithmetic as Step + StepFused, without tensors: scale q, k (B*H rows of D),
  // features (B*H rows of m), one pass over each session's S (and z), normalise.
  const auto& o = options();
  const int64_t b = int64_t(states.size()), h = o.num_heads, m = features_->size();
  const int64_t dv = o.value_dim;
  ScaleQKInPlace(q, k, b * h);
  float* phi_q = scratch;           // (B, H, m)
  float* phi_k = phi_q + b * h * m;  // (B, H, m)
  float* den = phi_k + b * h * m;    // (B, H)
  features_->QueriesInto(q, b * h, phi_q);
  features_->KeysInto(k, b * h, phi_k);
  const bool sum = normaliser_ == Normaliser::kSum;
  for (int64_t i = 0; i < b; ++i) {
    FeatureState& st = AsFeatureState(*states[i]);
    StateUpdateAndRead(st.s.data_ptr<float>(), sum ? st.z.data_ptr<float>() : nullptr,
                       phi_q + i * h * m, phi_k + i * h * m, v + i * h * dv, Decays(), h,
                       m, dv, out + i * h * dv, den + i * h);
    st.position += 1;
  }
  NormaliseRows(out, b * h, dv, dv, sum ? den : nullptr);
}

int64_t FeatureAttention::PrefillScratchFloats(int64_t t) const {
  const auto& o = options();
  const int64_t c = std::min<int64_t>(t, o.chunk_size), m = features_->size();
  // phi_q, phi_k, A, den, phi_q . z, gamma^0..gamma^C, gamma^(C-1-j)
  return 2 * c * o.num_heads * m + c * c + 2 * c + (c + 1) + c;
}

void FeatureAttention::PrefillRaw(AttentionState& state, int64_t t, float* q, float* k,
                                  const float* v, float* out, float* scratch) const {
  // PrefillChunk without tensors, per chunk of C tokens and per head h (row strides of the
  // (t, H, .) buffers: H*D, H*m, H*Dv):
  //   A   = K(q_h, k_h) masked to j <= i       (C, C): sgemm, then the kernel in place
  //   num = A v_h + phi_q_h S_h                (C, Dv): two sgemm into out
  //   den = rowsum(A) + phi_q_h z_h            (C)
  //   S_h += phi_k_h^T v_h, z_h += colsum(phi_k_h)   (after the read: causal)
  // Under a decay (gamma = gamma_h), as PrefillChunk: A[i][j] *= gamma^(i-j); phi_q row i
  // *= gamma^(i+1) before the read; S_h, z_h *= gamma^C and phi_k row j *= gamma^(C-1-j)
  // before the update.
  FeatureState& st = AsFeatureState(state);
  const auto& o = options();
  const int64_t h = o.num_heads, d = o.head_dim, dv = o.value_dim, m = features_->size();
  const int64_t chunk = o.chunk_size;
  const bool sum = normaliser_ == Normaliser::kSum;
  ScaleQKInPlace(q, k, t * h);
  const int64_t c_max = std::min(t, chunk);
  float* phi_q = scratch;                // (C, H, m)
  float* phi_k = phi_q + c_max * h * m;  // (C, H, m)
  float* a = phi_k + c_max * h * m;      // (C, C)
  float* den = a + c_max * c_max;        // (C)
  float* zden = den + c_max;             // (C)
  float* powers = zden + c_max;          // (C + 1): gamma^0 .. gamma^C
  float* rev = powers + c_max + 1;       // (C): gamma^(len-1-j)
  float* s_all = st.s.data_ptr<float>();  // (H, m, Dv)
  float* z_all = sum ? st.z.data_ptr<float>() : nullptr;  // (H, m)
  const int ldq = int(h * d), ldv = int(h * dv), ldp = int(h * m);
  for (int64_t start = 0; start < t; start += chunk) {
    const int64_t len = std::min(chunk, t - start);
    const int n = int(len);
    const float* qc = q + start * h * d;
    const float* kc = k + start * h * d;
    const float* vc = v + start * h * dv;
    float* oc = out + start * h * dv;
    features_->QueriesInto(qc, len * h, phi_q);
    features_->KeysInto(kc, len * h, phi_k);
    for (int64_t hh = 0; hh < h; ++hh) {
      float* pq = phi_q + hh * m;  // scaled in place under a decay
      float* pk = phi_k + hh * m;
      const float* vh = vc + hh * dv;
      float* oh = oc + hh * dv;
      float* sh = s_all + hh * m * dv;
      float* zh = sum ? z_all + hh * m : nullptr;
      // A (len, len): the kernel from q.k where it is a function of it, else phi_q phi_k^T.
      if (features_->KernelIsOfDots()) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(d), 1.0f, qc + hh * d,
                    ldq, kc + hh * d, ldq, 0.0f, a, n);
        features_->KernelFromDots(a, len * len);
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, int(m), 1.0f, pq, ldp, pk,
                    ldp, 0.0f, a, n);
      }
      if (!decays_.empty()) {
        powers[0] = 1.0f;
        for (int64_t i = 1; i <= len; ++i) powers[i] = powers[i - 1] * decays_[hh];
        for (int64_t j = 0; j < len; ++j) rev[j] = powers[len - 1 - j];
        for (int64_t i = 0; i < len; ++i) {
          float* row = a + i * len;
          for (int64_t j = 0; j <= i; ++j) row[j] *= powers[i - j];
        }
      }
      for (int64_t i = 0; i < len; ++i) std::fill(a + i * len + i + 1, a + (i + 1) * len, 0.0f);
      // num = A v_h + phi_q S_h, straight into out's rows for head h.
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(dv), n, 1.0f, a, n, vh,
                  ldv, 0.0f, oh, ldv);
      if (!decays_.empty()) ScaleRows(pq, len, m, ldp, powers + 1);
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, int(dv), int(m), 1.0f, pq, ldp,
                  sh, int(dv), 1.0f, oh, ldv);
      if (sum) {
        RowSums(a, len, len, len, den);
        cblas_sgemv(CblasRowMajor, CblasNoTrans, n, int(m), 1.0f, pq, ldp, zh, 1, 0.0f, zden,
                    1);
        for (int64_t i = 0; i < len; ++i) den[i] += zden[i];
      }
      if (!decays_.empty()) {
        ScaleRows(pk, len, m, ldp, rev);
        cblas_sscal(int(m * dv), powers[len], sh, 1);
        if (sum) cblas_sscal(int(m), powers[len], zh, 1);
      }
      if (sum) AddColumnSums(pk, len, m, ldp, zh);
      // S_h += phi_k^T v_h: (m, len) (len, Dv).
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(m), int(dv), n, 1.0f, pk, ldp,
                  vh, ldv, 1.0f, sh, int(dv));
      NormaliseRows(oh, len, dv, ldv, sum ? den : nullptr);
    }
  }
  st.position += t;
}

}  // namespace attnserve::attention
