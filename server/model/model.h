// A Llama-style decoder (server/DESIGN.md §3): token embedding, num_layers x (RMSNorm,
// attention with RoPE, residual, RMSNorm, SwiGLU, residual), final RMSNorm, untied head.
// The attention module of every layer is the one the config names; a layer's mixer may
// instead be recurrent (Mamba-2, short conv, Gated DeltaNet; DESIGN.md §11, §14) and its
// SwiGLU a mixture of experts (model_moe.cc).
//
// The model is read-only after Create/Load and may be shared by threads; per-session
// state (DecodeState) is owned by the caller and passed in. Prefill and Step run
// without autograd; Forward records it when parameters require grad (training).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "server/attention/attention.h"
#include "server/common/sha256.h"
#include "server/model/config.h"
#include "server/model/step_kernels.h"
#include "server/weights/packed_matrix.h"

namespace attnserve::model {

// One session's recurrent state: an attention state per layer and the position.
class DecodeState {
 public:
  // Tokens appended so far (the next token's RoPE position).
  int64_t position() const { return position_; }
  // Tensor bytes held across all layers.
  int64_t Bytes() const;
  // Tensor bytes held once `extra` more tokens are in (AttentionState::BytesAfter).
  int64_t BytesAfter(int64_t extra) const;
  std::unique_ptr<DecodeState> Clone() const;
  // A state to Rewind to if the appends that follow fail or are abandoned
  // (AttentionState::Checkpoint: a copy of fixed states, the length of KV caches).
  std::unique_ptr<DecodeState> Checkpoint() const;
  // Goes back to `checkpoint`, taken from this state with nothing but appends since.
  void Rewind(std::unique_ptr<DecodeState> checkpoint);

  // Layer `l`'s state, for snapshots (AttentionState::Tensors).
  int num_layers() const { return int(layers_.size()); }
  const attention::AttentionState& layer(int l) const { return *layers_[l]; }

 private:
  friend class Model;
  std::vector<std::unique_ptr<attention::AttentionState>> layers_;
  int64_t position_ = 0;
  const void* owner_ = nullptr;  // the Model that made it, to reject foreign states
};

// How to load a model directory.
struct LoadOptions {
  // Serve the weights with this module instead of the trained one, where
  // attention::CheckServableAs allows it; empty keeps the trained module.
  std::string attention_module;
  // Order for attention_module (taylor, taylor_norm); 0 keeps the trained order.
  int attention_order = 0;
  // Largest fixed state per session per layer (rejects orders that would exceed it).
  int64_t max_state_bytes_per_layer = attention::AttentionOptions{}.max_state_bytes_per_layer;
  // Decode from bf16 copies of the weight matrices (Model::UseBf16Weights); matrices
  // kept packed are left as they are.
  bool weights_bf16 = false;
  // Keep fixed-state modules' recurrent states in bf16 (attention::AttentionOptions::
  // state_bf16: half the state bytes); KV-cache modules ignore it.
  bool state_bf16 = false;
  // How KV-cache layers store keys and values (attention::AttentionOptions::
  // kv_cache_type).
  attention::KvCacheType kv_cache_type = attention::KvCacheType::kF32;
  // Every weight as an fp32 tensor (the trainer updates them; Save writes them): F16,
  // BF16 and quantized tensors are dequantized. Otherwise they stay packed as the file
  // holds them (Model::WeightBytes).
  bool dequantize = false;
  // Quantize a directory's fp32 / F16 / BF16 matrices and embedding at load: "" (keep),
  // "q8_0", "q4_0", "q4_k", "q5_k" or "q6_k" (rows must be whole blocks: 32 or 256
  // values). GGUF files keep their own types.
  std::string quantize;
};

// Hugging Face's name of internal parameter `name` (NamedParameters): "layers.3.wq" ->
// "model.layers.3.self_attn.q_proj.weight", "layers.3.attn.temperature" ->
// "model.layers.3.self_attn.temperature", "head" -> "lm_head.weight", ...
std::string HfTensorName(const std::string& name);

class Model {
 public:
  // A model with freshly initialised weights (N(0, 0.02); residual outputs scaled by
  // 1/sqrt(2 * num_layers)), deterministic in `seed`.
  static absl::StatusOr<std::unique_ptr<Model>> Create(const ModelConfig& config,
                                                       uint64_t seed);
  // Reads a model directory (model_io.cc): `dir`/config.json (hf_config.h) and
  // `dir`/model.safetensors or its shards (safetensors.h), tensors by Hugging Face's
  // names (HfTensorName). Every parameter must be present with the config's shape, except
  // lm_head.weight when the embeddings are tied; buffers that are not weights
  // (self_attn.abs_pos_enc.pe, rotary_emb.inv_freq) are skipped and listed in one line on
  // stderr; any other tensor is refused. The vocabulary is the embedding's rows when
  // config.json's vocab_size says otherwise. See LoadOptions for serving the weights with
  // another attention module (config() then reports the module it runs).
  // The linear weights and the embedding stay in the bytes the file holds (F16 and BF16
  // as 16-bit, GGUF's quantized blocks as they are; server/weights/packed_matrix.h)
  // unless options.dequantize; options.quantize quantizes a directory's at load.
  // `dir` may instead be a .gguf file (gguf_model.h: llama, qwen2, qwen3, the recurrent
  // and hybrid families, the Gated DeltaNet hybrids, mixtures of experts): softmax
  // attention in its attention layers.
  static absl::StatusOr<std::unique_ptr<Model>> Load(const std::string& dir,
                                                     const LoadOptions& options = {});
  // Writes config.json and model.safetensors (F32, Hugging Face's names; no lm_head.weight
  // when tied) into `dir` (created if missing): what Load reads back to the same
  // Fingerprint.
  absl::Status Save(const std::string& dir) const;

  const ModelConfig& config() const { return config_; }

  // Parallel path. tokens: (B, T) int64 ids -> logits (B, T, V) fp32.
  at::Tensor Forward(const at::Tensor& tokens) const;

  std::unique_ptr<DecodeState> NewState() const;

  // Names and shapes of layer `layer`'s state tensors at `position`: its attention
  // module's (Attention::StateShapes), or a recurrent layer's "conv" (and "ssm": Mamba-2's
  // or Gated DeltaNet's state; RecurrentState).
  attention::TensorShapes StateShapes(int layer, int64_t position) const;
  // A state at `position` made of `layers[l]` for each layer (taken as
  // Attention::RestoreState says), whose names and shapes the caller has checked against
  // StateShapes(l, position). INVALID_ARGUMENT for a
  // position past max_context or the wrong number of layers.
  absl::StatusOr<std::unique_ptr<DecodeState>> RestoreState(
      int64_t position, const std::vector<attention::NamedTensors>& layers) const;

  // SHA-256 of what makes a state meaningful to this model (proto/attnserve/v1/
  // SNAPSHOT.md): the config's text (attention module and options included) and the
  // weights. Computed on first use (the weights are hashed once per set of weights);
  // thread-safe.
  const Sha256Digest& Fingerprint() const;

  // The same weights served with attention `module` of `order` (0: keep the order),
  // where attention::CheckServableAs allows it. The new model shares this model's
  // weight tensors (no copy, no reload); trained attention parameters are copied.
  absl::StatusOr<std::unique_ptr<Model>> ServeAs(const std::string& module, int order,
                                                 int64_t max_state_bytes_per_layer) const;

  // Appends `tokens` to one session (chunked prefill) and returns the logits after each
  // appended token: (T, V). Rejects empty input, ids outside the vocabulary and
  // sessions that would pass max_context. Takes the fused path (model_step.cc: the
  // modules' PrefillRaw) whenever Step does, else the LibTorch one (Run).
  absl::StatusOr<at::Tensor> Prefill(DecodeState& state,
                                     absl::Span<const int32_t> tokens) const;

  // One token for each of B sessions, each at its own position: returns (B, V).
  // states[b] receives tokens[b]; states must be distinct. Runs the fused step
  // (model_step.cc: preallocated buffers, direct BLAS calls, fused loops, the modules'
  // StepRaw) unless attention.reference_kernels is set or ATTNSERVE_REFERENCE_STEP=1 was
  // in the environment when the model was created: then the LibTorch path (Run), the
  // reference it is tested against. One fused step runs at a time (workspace mutex).
  absl::StatusOr<at::Tensor> Step(absl::Span<DecodeState* const> states,
                                  absl::Span<const int32_t> tokens) const;
  // Whether Step takes the fused path.
  bool UsesFusedStep() const { return fused_step_; }

  // Part of one engine step: `tokens` appended to `state` (one for a decoding turn, a
  // prompt chunk for a prefilling one).
  struct Segment {
    DecodeState* state;
    absl::Span<const int32_t> tokens;
  };
  // Whether `tokens` may be appended to `state`: not empty, ids in the vocabulary, the
  // state this model's, max_context not passed. Batch checks every segment with it.
  absl::Status CheckAppend(const DecodeState& state, absl::Span<const int32_t> tokens) const;
  // One engine step over every segment at once (server/DESIGN.md §4): the rows of all
  // segments go through the projections and MLPs together; attention takes the one-token
  // segments together (the modules' StepRaw) and each longer one as a prefill (PrefillRaw).
  // Returns (S, V): the logits after each segment's last token. States must be distinct.
  // Without the fused path: Step over the one-token segments and Prefill for each other,
  // the reference this is tested against (tests/model/model_step_test.cc, FusedBatch).
  // On failure each state is either untouched, position included (always so when a check
  // fails: nothing has run then), or at a new position with its layers in no known
  // condition: Rewind it to a checkpoint or discard it. Prefill and Step likewise: a
  // state's position moves before its layers do.
  absl::StatusOr<at::Tensor> Batch(absl::Span<const Segment> segments) const;

  // Bytes of recurrent state one session holds after `context` tokens, all layers.
  int64_t StateBytes(int64_t context) const;
  // Context length from which this model's fixed state is smaller than a KV cache of
  // the same shape; 0 for KV-cache modules. For a model with recurrent layers: smaller
  // than the same model with every layer softmax attention.
  int64_t BreakEvenContext() const;
  // StateBytes(context) by layer kind ("attention", "mamba2", "shortconv",
  // "gated_deltanet"), in the order
  // the kinds first appear: a hybrid's state grows only in its attention layers.
  struct MixerBytes {
    std::string mixer;
    int layers = 0;
    int64_t bytes = 0;  // all layers of the kind, one session
  };
  std::vector<MixerBytes> StateBytesByMixer(int64_t context) const;
  int64_t ParameterCount() const;
  // Bytes the weights hold in memory: fp32 tensors, packed matrices (their file's bytes)
  // and bf16 copies (UseBf16Weights).
  int64_t WeightBytes() const;
  // "F32", or the packed matrices' types by share of their bytes ("Q4_K 82%, Q6_K 18%").
  std::string WeightTypes() const;

  // From now on the fused path's projections read bf16 copies of the weight matrices
  // (step_kernels.h LinearBf16, fp32 arithmetic) whenever a call has at most
  // kBf16MaxRows rows (decode steps of a few sessions, prompts of a few tokens): half
  // the weight bytes per decode step. Larger batches and prompts, and the LibTorch
  // reference, keep the fp32 weights, which stay. Fingerprint() then
  // says bf16: a session's state is only byte-exact on a server with the same weights.
  // Call before the model serves (not thread-safe against Step); ServeAs variants made
  // afterwards share the copies.
  void UseBf16Weights();
  bool UsesBf16Weights() const { return bf16_ != nullptr; }

  // Every trained tensor by its internal name ("embed", "layers.3.wq", ..., "head"; no
  // "head" when tied, since the head is "embed"), each once. The tensors are the model's
  // own: the trainer updates them in place. HfTensorName maps the names to a directory's.
  // Matrices kept packed are not tensors and are not listed (PackedParameters).
  attention::NamedTensors NamedParameters() const;
  // The packed matrices by internal name, each once; empty for an fp32 model.
  std::vector<std::pair<std::string, std::shared_ptr<const weights::PackedMatrix>>>
  PackedParameters() const;
  bool HasPackedWeights() const;

 private:
  static absl::StatusOr<std::unique_ptr<Model>> LoadGguf(const std::string& path,
                                                         const LoadOptions& options);
  using Packed = std::shared_ptr<const weights::PackedMatrix>;
  // The linear weights of a layer, in the order of Layer::packed.
  // kInProj and kOutProj are a recurrent layer's (Mamba-2: z | xBC | dt and back to dim;
  // short conv: b | c | x and back), where an attention layer has wq .. wo.
  // A Gated DeltaNet layer's kInProj is its q | k | v projection, kGdnZ, kGdnBeta and
  // kGdnAlpha its z, beta and alpha ones. kRouter is a MoE layer's router; its shared
  // expert is kWGate, kWUp, kWDown.
  enum Matrix {
    kWq, kWk, kWv, kWo, kWGate, kWUp, kWDown, kInProj, kOutProj, kGdnZ, kGdnBeta, kGdnAlpha,
    kRouter, kMatrices
  };
  // One expert of a MoE layer: gate, up (F, dim), down (dim, F), each a tensor or packed.
  struct Expert {
    at::Tensor gate, up, down;
    Packed gate_packed, up_packed, down_packed;
  };
  struct Layer {
    // (dim); wq (H*D, dim); wk, wv (Hkv*D, dim); wo (dim, H*D): H query heads, Hkv KV
    // heads of head_dim D (attention options), independent of dim. A matrix kept packed
    // is undefined here and held in `packed`.
    at::Tensor attn_norm, wq, wk, wv, wo;
    at::Tensor mlp_norm, w_gate, w_up, w_down;  // (dim), (hidden, dim) x 2, (dim, hidden)
    std::unique_ptr<attention::Attention> attention;
    at::Tensor bq, bk, bv;       // attention_bias: (H*D), (Hkv*D) x 2; else undefined
    at::Tensor q_norm, k_norm;   // qk_head_norm: (D) each; else undefined
    std::array<Packed, kMatrices> packed;  // null where the matrix is the fp32 tensor
    // The mixer (ModelConfig::Mixer): attention (`attention` set) or a recurrent one
    // (`attention` null) with, for Mamba-2 (I inner, C = I + 2GN conv channels, H heads):
    // in_proj (2I + 2GN + H, dim), conv_w (C, K), conv_b (C), dt_bias (H), ssm_a (H, 1)
    // (A itself, negative), ssm_d (H, 1), ssm_norm (G, I / G), out_proj (dim, I); for
    // the short conv: in_proj (3 dim, dim), conv_w (dim, K), out_proj (dim, dim).
    // For Gated DeltaNet (C = 2 n_k d_k + n_v d_v conv channels): in_proj (C, dim) (q | k
    // | v), gdn_z (n_v d_v, dim), gdn_beta and gdn_alpha (n_v, dim), conv_w (C, K) (no
    // bias), dt_bias (n_v), ssm_a (n_v), ssm_norm (d_v), out_proj (dim, n_v d_v).
    std::string mixer;
    at::Tensor in_proj, out_proj, conv_w, conv_b, dt_bias, ssm_a, ssm_d, ssm_norm;
    at::Tensor gdn_z, gdn_beta, gdn_alpha;
    // A MoE FFN (ModelConfig::experts > 0) in place of the SwiGLU: router (E, dim), the
    // experts, the selection bias (E) (undefined: none); w_gate, w_up, w_down are then
    // the shared expert (shared_expert_hidden wide; undefined when it has none) and
    // shared_gate (dim) its sigmoid gate (undefined: ungated).
    at::Tensor router, expert_bias, shared_gate;
    std::vector<Expert> experts;
    const at::Tensor& dense(Matrix m) const;
  };
  // Attention over rotated q: (B, H, T, D), k: (B, Hkv, T, D) and v: (B, Hkv, T, Dv)
  // -> (B, H, T, Dv).
  using AttendFn = std::function<at::Tensor(const attention::Attention&, int layer,
                                            const at::Tensor& q, const at::Tensor& k,
                                            const at::Tensor& v)>;
  // Sequence b's state in recurrent layer `layer` (Run's B sequences).
  using RecurrentStateFn = std::function<attention::AttentionState&(int layer, int64_t b)>;

  explicit Model(ModelConfig config) : config_(std::move(config)) {}
  // A model of `config` whose layers have their attention modules and no weights yet
  // (Create and the loaders fill them in).
  static absl::StatusOr<std::unique_ptr<Model>> CreateEmpty(const ModelConfig& config);
  // Every tensor and packed matrix by its internal name: NamedParameters' tensors and
  // PackedParameters' matrices (a slot holds one of the two).
  struct Slot {
    std::string name;
    at::Tensor* dense;
    Packed* packed;  // null for tensors that are never packed (norms, biases)
    std::vector<int64_t> shape;
  };
  std::vector<Slot> Slots();
  // x (..., in) W^T through LibTorch: W dequantized into a temporary when packed.
  static at::Tensor LinearRef(const at::Tensor& x, const at::Tensor& dense, const Packed& packed);
  // tokens (B, T) int64, positions (B, T) int64 -> logits (B, T, V). Recurrent layers run
  // the plain reference kernels (server/mixer) over each sequence from state_of(l, b).
  at::Tensor Run(const at::Tensor& tokens, const at::Tensor& positions, const AttendFn& attend,
                 const RecurrentStateFn& state_of) const;
  // A recurrent layer through the reference kernels: hn (T, dim) of one sequence, from
  // and into `state` -> (T, dim), before the residual scale.
  at::Tensor RecurrentRef(const Layer& l, const at::Tensor& hn,
                          attention::AttentionState& state) const;
  // A MoE FFN through LibTorch (model_moe.cc): hn (..., dim) -> (..., dim), before the
  // residual scale.
  at::Tensor MoeRef(const Layer& l, const at::Tensor& hn) const;
  // The same on raw rows for the fused pass (model_moe.cc): hn (rows, dim) -> out (rows,
  // dim) (+ beta out). Rows are grouped by expert so each expert's weights are read once
  // for all the rows routed to it. The caller holds workspace_.mu.
  void MoeRows(const Layer& l, const float* hn, int64_t rows, float* out, float beta) const;
  // The experts and their weights for one row of router logits (E) (ModelConfig's
  // routing): writes experts_used indices and weights.
  void Route(const Layer& l, const float* logits, int32_t* experts, float* weights) const;
  absl::Status CheckTokens(absl::Span<const int32_t> tokens) const;
  // Sets fused_step_ once the layers exist (Create, ServeAs).
  void ChooseStepPath();
  // The fused step (model_step.cc) over validated, distinct states: (B, V) logits.
  at::Tensor StepFused(absl::Span<DecodeState* const> states,
                       absl::Span<const int32_t> tokens) const;
  // The fused prefill (model_step.cc) of validated tokens: (T, V) logits.
  at::Tensor PrefillFused(DecodeState& state, absl::Span<const int32_t> tokens) const;
  // The fused Batch (model_step.cc) over validated, distinct segments: (S, V).
  at::Tensor BatchFused(absl::Span<const Segment> segments) const;
  // The rows of one fused pass: the first `decode` rows are one token each of distinct
  // sessions (decode_states[i]), then each prefill segment's rows in order: a session and
  // its tokens' rows [first, first + count).
  struct RowGroups {
    std::vector<DecodeState*> decode_states;
    struct Prefill {
      DecodeState* state;
      int64_t first, count;
    };
    std::vector<Prefill> prefills;
  };
  // The layers on raw buffers for the rows of `groups` (token tokens[i] at positions[i]);
  // attention layers by the modules' StepRaw over the decode rows and PrefillRaw over each
  // prefill segment, recurrent ones by server/mixer's step and chunked prefill likewise:
  // (rows, V) logits, or (R, V) for just the rows `logit_rows` lists (ascending; the
  // head is most of a prompt's work at a large vocabulary). The caller holds
  // workspace_.mu and has moved the positions.
  at::Tensor RunRowsFused(absl::Span<const int32_t> tokens, const int64_t* positions,
                          const RowGroups& groups,
                          absl::Span<const int64_t> logit_rows = {}) const;

  // UseBf16Weights' copies: per layer wq, wk, wv, wo, w_gate, w_up, w_down; the head.
  struct Bf16Weights {
    std::vector<std::array<Bf16Matrix, kMatrices>> layers;
    Bf16Matrix head;
  };

  ModelConfig config_;
  std::shared_ptr<const Bf16Weights> bf16_;  // null: fp32 only
  at::Tensor embed_;  // (V, dim); undefined when packed
  Packed embed_packed_;
  std::vector<Layer> layers_;
  at::Tensor norm_;  // (dim)
  at::Tensor head_;  // (V, dim); embed_ itself when tied; undefined when packed
  Packed head_packed_;  // embed_packed_ itself when tied
  at::Tensor inv_freq_;  // (rope_dims / 2) fp64 RoPE frequencies; 0 for pairs not rotated

  // Buffers of the fused step, grown to the largest batch seen and then reused.
  struct StepWorkspace {
    std::mutex mu;
    std::vector<float> x, hn, q, k, v, o, gate, up, cos, sin, scratch, linear;
    std::vector<float> proj, conv, mixed;  // recurrent layers: in_proj out, conv out, y
    std::vector<float> gdn_z, gdn_beta, gdn_alpha;  // Gated DeltaNet's other projections
    std::vector<float> q_gate;  // gated attention: wq's output (q | gate per head), gates
    // MoE FFN rows: router logits, an expert's rows in and out, Linear's scratch
    std::vector<float> router, moe_in, moe_gate, moe_up, moe_out, moe_linear;
    weights::LinearScratch packed;  // PackedLinear's quantized activations
  };
  bool fused_step_ = false;
  mutable StepWorkspace workspace_;

  // Fingerprint(): the weights' digest is shared with every ServeAs variant.
  struct WeightsDigest {
    std::once_flag once;
    Sha256Digest digest{};
  };
  std::shared_ptr<WeightsDigest> weights_digest_ = std::make_shared<WeightsDigest>();
  mutable std::once_flag fingerprint_once_;
  mutable Sha256Digest fingerprint_{};
};

}  // namespace attnserve::model
