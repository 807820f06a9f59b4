#include "server/attention/kv_attention.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "server/attention/kv_kernels.h"

namespace attnserve::attention {

namespace {

at::ScalarType DtypeOf(KvCacheType type) {
  switch (type) {
    case KvCacheType::kF16: return at::kHalf;
    case KvCacheType::kBF16: return at::kBFloat16;
    case KvCacheType::kQ8_0: return at::kByte;  // whole blocks, KvRowBytes a row
    default: return at::kFloat;
  }
}

// The last dimension of a tensor holding rows of n values as `type`: n, or the bytes of
// its q8_0 blocks.
int64_t StoredWidth(KvCacheType type, int64_t n) {
  return type == KvCacheType::kQ8_0 ? KvRowBytes(type, n) : n;
}

// Rows (..., n) of any float type quantized to q8_0 blocks (..., KvRowBytes(n)) (at::kByte)
// by StoreKvRow: LibTorch has no such type.
at::Tensor QuantizeQ8_0(const at::Tensor& rows) {
  const at::Tensor x = rows.to(at::kFloat).contiguous();
  const int64_t n = x.size(-1);
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = KvRowBytes(KvCacheType::kQ8_0, n);
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(at::kByte));
  StoreKvRow(KvCacheType::kQ8_0, x.data_ptr<float>(), x.numel(), out.data_ptr());
  return out;
}

// q8_0 blocks (..., KvRowBytes(n)) (at::kByte) back to fp32 rows (..., n).
at::Tensor DequantizeQ8_0(const at::Tensor& blocks, int64_t n) {
  const at::Tensor x = blocks.contiguous();
  std::vector<int64_t> sizes(x.sizes().begin(), x.sizes().end());
  sizes.back() = n;
  at::Tensor out = at::empty(sizes, at::TensorOptions().dtype(at::kFloat));
  LoadKvRows(KvCacheType::kQ8_0, x.data_ptr(), out.numel(), out.data_ptr<float>());
  return out;
}

}  // namespace

// One session's KV cache in one layer: the keys and values of the Hkv KV heads, stored
// as the options' kv_cache_type in blocks that never move. Block i holds
// min(16 << i, kMaxBlockRows) tokens (a short session holds little; a long one grows by
// whole blocks), so appending never copies what is cached and the spare capacity is at
// most one block. A block is a (Hkv, rows, D) tensor whose rows are contiguous per head;
// a restored cache's full blocks are views into the restored tensors (head stride the
// restored length), so restoring copies only the last, partial block.
class KvState : public AttentionState {
 public:
  static constexpr int64_t kFirstBlockRows = 16;
  static constexpr int64_t kMaxBlockRows = 256;

  struct Block {
    at::Tensor k;  // (Hkv, rows, D), stored type (q8_0: (Hkv, rows, KvRowBytes(D)) bytes)
    at::Tensor v;  // (Hkv, rows, Dv)
    int64_t first = 0;  // position of its first row
    int64_t rows() const { return k.size(1); }
  };

  KvState(int64_t hkv, int64_t d, int64_t dv, KvCacheType type)
      : hkv_(hkv), d_(d), dv_(dv), type_(type) {}

  int64_t Position() const override { return length; }
  int64_t Bytes() const override { return Capacity() * PerToken(); }
  int64_t BytesAfter(int64_t extra) const override {
    int64_t cap = Capacity();
    for (size_t i = blocks.size(); cap < length + extra; ++i) cap += RowsOfBlock(i);
    return cap * PerToken();
  }
  std::unique_ptr<AttentionState> Clone() const override {
    // Blocks of its own holding exactly the used rows, so a copy holds what its nominal
    // size says.
    auto copy = std::make_unique<KvState>(hkv_, d_, dv_, type_);
    if (length > 0) {
      Block b{Keys(/*fp32=*/false).clone(), Values(/*fp32=*/false).clone(), 0};
      copy->blocks.push_back(std::move(b));
      copy->length = length;
    }
    return copy;
  }
  NamedTensors Tensors() const override {
    return {{"k", Keys(/*fp32=*/false)}, {"v", Values(/*fp32=*/false)}};
  }
  std::unique_ptr<AttentionState> Checkpoint() const override {
    auto copy = std::make_unique<KvState>(hkv_, d_, dv_, type_);
    copy->blocks = blocks;  // shares storage; appends write past the length it remembers
    copy->length = length;
    return copy;
  }

  // Tokens the blocks hold.
  int64_t Capacity() const {
    return blocks.empty() ? 0 : blocks.back().first + blocks.back().rows();
  }
  // Adds blocks until `extra` more tokens fit.
  void Reserve(int64_t extra) {
    while (Capacity() < length + extra) {
      const int64_t rows = RowsOfBlock(blocks.size());
      const auto options = at::TensorOptions().dtype(DtypeOf(type_));
      blocks.push_back({at::empty({hkv_, rows, StoredWidth(type_, d_)}, options),
                        at::empty({hkv_, rows, StoredWidth(type_, dv_)}, options), Capacity()});
    }
  }
  // The block holding position `pos` (< Capacity()).
  Block& BlockAt(int64_t pos) {
    auto it = std::upper_bound(blocks.begin(), blocks.end(), pos,
                               [](int64_t p, const Block& b) { return p < b.first; });
    return *(it - 1);
  }

  // k: (Hkv, T, D), v: (Hkv, T, Dv) appended at [length, length + T): fp32 rows converted
  // to the stored type by LibTorch (the reference path; q8_0 by StoreKvRow), or rows
  // already in the stored type (a restore's last, partial block).
  void Append(const at::Tensor& k_rows, const at::Tensor& v_rows) {
    const bool q8 = type_ == KvCacheType::kQ8_0;
    auto stored = [q8](const at::Tensor& rows) {
      return q8 && rows.scalar_type() != at::kByte ? QuantizeQ8_0(rows) : rows;
    };
    const at::Tensor new_k = stored(k_rows), new_v = stored(v_rows);
    const int64_t t = new_k.size(1);
    Reserve(t);
    for (int64_t done = 0; done < t;) {
      Block& b = BlockAt(length + done);
      const int64_t at_row = length + done - b.first;
      const int64_t n = std::min(t - done, b.rows() - at_row);
      b.k.narrow(1, at_row, n).copy_(new_k.narrow(1, done, n));
      b.v.narrow(1, at_row, n).copy_(new_v.narrow(1, done, n));
      done += n;
    }
    length += t;
  }
  // Token `pos`'s (< Capacity()) key and value rows of KV head j, stored from fp32
  // (StoreKvRow: the same bits as Append's copy_).
  void StoreRows(int64_t pos, int64_t j, const float* k, const float* v) {
    Block& b = BlockAt(pos);
    const int64_t r = pos - b.first;
    StoreKvRow(type_, k, d_, static_cast<char*>(b.k.data_ptr()) + Offset(b.k, j, r));
    StoreKvRow(type_, v, dv_, static_cast<char*>(b.v.data_ptr()) + Offset(b.v, j, r));
  }
  // KV head j's spans over the first `len` tokens, in position order.
  void Spans(int64_t j, int64_t len, std::vector<KvSpan>* out) const {
    out->clear();
    for (const Block& b : blocks) {
      if (b.first >= len) break;
      const char* k = static_cast<const char*>(b.k.data_ptr()) + Offset(b.k, j, 0);
      const char* v = static_cast<const char*>(b.v.data_ptr()) + Offset(b.v, j, 0);
      out->push_back({k, v, std::min(b.rows(), len - b.first)});
    }
  }
  // KV head j's first `len` keys and values as fp32, contiguous: k (len, D), v (len, Dv).
  void Gather(int64_t j, int64_t len, float* k, float* v) const {
    std::vector<KvSpan> spans;
    Spans(j, len, &spans);
    for (const KvSpan& s : spans) {
      LoadKvRows(type_, s.k, s.rows * d_, k);
      LoadKvRows(type_, s.v, s.rows * dv_, v);
      k += s.rows * d_;
      v += s.rows * dv_;
    }
  }

  // The used rows as (Hkv, L, D) / (Hkv, L, Dv): in the stored type (a view when one
  // block holds them, else a copy), or converted to fp32.
  at::Tensor Keys(bool fp32 = true) const { return Used(&Block::k, d_, fp32); }
  at::Tensor Values(bool fp32 = true) const { return Used(&Block::v, dv_, fp32); }

  KvCacheType type() const { return type_; }

  std::vector<Block> blocks;
  int64_t length = 0;

  static int64_t RowsOfBlock(size_t i) {
    return i >= 5 ? kMaxBlockRows : std::min(kFirstBlockRows << i, kMaxBlockRows);
  }

 private:
  int64_t PerToken() const {
    return hkv_ * (KvRowBytes(type_, d_) + KvRowBytes(type_, dv_));
  }
  // Byte offset of row r of head j in a block tensor.
  static int64_t Offset(const at::Tensor& t, int64_t j, int64_t r) {
    return (j * t.stride(0) + r * t.stride(1)) * int64_t(t.element_size());
  }
  at::Tensor Used(at::Tensor Block::*which, int64_t width, bool fp32) const {
    std::vector<at::Tensor> parts;
    for (const Block& b : blocks) {
      if (b.first >= length) break;
      parts.push_back((b.*which).narrow(1, 0, std::min(b.rows(), length - b.first)));
    }
    at::Tensor out =
        parts.empty()
            ? at::empty({hkv_, 0, StoredWidth(type_, width)},
                        at::TensorOptions().dtype(DtypeOf(type_)))
            : (parts.size() == 1 ? parts[0] : at::cat(parts, 1));
    if (!fp32) return out;
    return type_ == KvCacheType::kQ8_0 ? DequantizeQ8_0(out, width) : out.to(at::kFloat);
  }

  const int64_t hkv_, d_, dv_;
  const KvCacheType type_;
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
  return std::make_unique<KvState>(o.num_kv_heads, o.head_dim, o.value_dim, o.kv_cache_type);
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
    // q8_0 rows (at::kByte) are their blocks' bytes wide.
    std::vector<int64_t> want = shapes[i].second;
    if (tensors[i].second.scalar_type() == at::kByte) {
      want.back() = StoredWidth(KvCacheType::kQ8_0, want.back());
    }
    TORCH_CHECK(tensors[i].first == shapes[i].first &&
                    tensors[i].second.sizes() == at::IntArrayRef(want),
                "RestoreState: tensor ", i, " is not ", shapes[i].first);
  }
  const auto& o = options();
  auto st = std::make_unique<KvState>(o.num_kv_heads, o.head_dim, o.value_dim, o.kv_cache_type);
  // In the stored type (a no-op when the snapshot's is the cache's; rounded to nearest
  // even when it narrows to 16 bits, quantized when it narrows to q8_0, dequantized when
  // it widens from q8_0). Full blocks are views of these tensors; the last, partial one is
  // a block of its own with room for what follows.
  const at::ScalarType dtype = DtypeOf(o.kv_cache_type);
  auto stored = [&](const at::Tensor& t, int64_t width) {
    const bool from_q8 = t.scalar_type() == at::kByte;
    if (o.kv_cache_type == KvCacheType::kQ8_0) return from_q8 ? t.contiguous() : QuantizeQ8_0(t);
    return (from_q8 ? DequantizeQ8_0(t, width) : t).to(dtype).contiguous();
  };
  const at::Tensor k = stored(tensors[0].second, o.head_dim);
  const at::Tensor v = stored(tensors[1].second, o.value_dim);
  int64_t first = 0;
  for (size_t i = 0;; ++i) {
    const int64_t rows = KvState::RowsOfBlock(i);
    if (first + rows > position) break;
    st->blocks.push_back({k.narrow(1, first, rows), v.narrow(1, first, rows), first});
    first += rows;
  }
  st->length = first;
  if (first < position) st->Append(k.narrow(1, first, position - first),
                                   v.narrow(1, first, position - first));
  return st;
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
  // Step without tensors: store each session's k, v (Hkv heads) in its cache (adding a
  // block when full), then per KV head one pass over its cache's blocks for the G query
  // heads of its group (KvGroupAttendSpans: two sgemv for G = 1, two sgemm otherwise, per
  // tile of stored rows read into fp32, and ExpShifted); normalise by the weight sum
  // (softmax) or the L2 norm (softmax_norm).
  const auto& o = options();
  const int64_t b = int64_t(states.size()), h = o.num_heads, hkv = o.num_kv_heads;
  const int64_t g = group(), d = o.head_dim, dv = o.value_dim;
  ScaleQKInPlace(q, b * h, k, b * hkv);
  int64_t longest = 0;
  for (AttentionState* s : states) longest = std::max(longest, s->Position() + 1);
  std::vector<float> scores(g * longest), sums(g);  // (G, L), (G)
  std::vector<float> tile(KvSpanTileFloats(d, dv));
  std::vector<KvSpan> spans;
  for (int64_t i = 0; i < b; ++i) {
    KvState& st = AsKvState(*states[i]);
    st.Reserve(1);
    for (int64_t j = 0; j < hkv; ++j) {
      st.StoreRows(st.length, j, k + (i * hkv + j) * d, v + (i * hkv + j) * dv);
    }
    st.length += 1;
    for (int64_t j = 0; j < hkv; ++j) {
      float* rows = out + (i * h + j * g) * dv;  // (G, Dv): the group's query heads
      st.Spans(j, st.length, &spans);
      KvGroupAttendSpans(st.type(), q + (i * h + j * g) * d, spans, g, st.length, d, dv,
                         scores.data(), tile.data(), rows, sums.data());
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
  // Prefill without tensors: store the t keys and values (Hkv heads) in the cache, then
  // per KV head read its keys and values (all the prompt's queries may see) into fp32
  // once, and per block of queries and per query head of its group one kernel call over
  // the keys they may see (kv_kernels.h); normalise as StepRaw does. KvFlashAttend never
  // stores the scores, so its blocks are large (it reads the keys once per block);
  // KvBlockAttend's blocks are the option's chunks, which bound its score scratch.
  KvState& st = AsKvState(state);
  const auto& o = options();
  const int64_t h = o.num_heads, hkv = o.num_kv_heads, g = group();
  const int64_t d = o.head_dim, dv = o.value_dim;
  const bool flash = KvFlashSupported(d, dv);
  constexpr int64_t kFlashBlock = 512;
  const int64_t block = flash ? kFlashBlock : o.chunk_size;
  ScaleQKInPlace(q, t * h, k, t * hkv);
  st.Reserve(t);
  const int64_t before = st.length;
  for (int64_t i = 0; i < t; ++i) {
    for (int64_t j = 0; j < hkv; ++j) {
      st.StoreRows(before + i, j, k + (i * hkv + j) * d, v + (i * hkv + j) * dv);
    }
  }
  st.length += t;
  const int64_t keys = before + t, c_max = std::min(t, block);
  std::vector<float> kc(keys * d), vc(keys * dv);  // one KV head's (L, D), (L, Dv) in fp32
  std::vector<float> scores(flash ? 0 : c_max * keys), sums(c_max);  // (C, L), (C)
  for (int64_t j = 0; j < hkv; ++j) {
    st.Gather(j, keys, kc.data(), vc.data());
    for (int64_t start = 0; start < t; start += block) {
      const int64_t len = std::min(block, t - start);
      for (int64_t hh = j * g; hh < (j + 1) * g; ++hh) {
        const float* qh = q + (start * h + hh) * d;  // rows of head hh, stride H * D
        float* oh = out + (start * h + hh) * dv;     // rows of head hh, stride H * Dv
        if (flash) {
          KvFlashAttend(qh, h * d, kc.data(), vc.data(), before + start, len, d, dv, oh, h * dv,
                        sums.data());
        } else {
          KvBlockAttend(qh, h * d, kc.data(), vc.data(), before + start, len, d, dv,
                        scores.data(), oh, h * dv, sums.data());
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
}

}  // namespace attnserve::attention
