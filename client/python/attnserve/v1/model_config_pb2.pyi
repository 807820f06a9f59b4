from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AttentionConfig(_message.Message):
    __slots__ = ["chunk_size", "decay_horizon", "learn_temperature", "module", "order", "qk_norm", "qk_temperature", "unscaled_query"]
    CHUNK_SIZE_FIELD_NUMBER: _ClassVar[int]
    DECAY_HORIZON_FIELD_NUMBER: _ClassVar[int]
    LEARN_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    MODULE_FIELD_NUMBER: _ClassVar[int]
    ORDER_FIELD_NUMBER: _ClassVar[int]
    QK_NORM_FIELD_NUMBER: _ClassVar[int]
    QK_TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    UNSCALED_QUERY_FIELD_NUMBER: _ClassVar[int]
    chunk_size: int
    decay_horizon: float
    learn_temperature: bool
    module: str
    order: int
    qk_norm: bool
    qk_temperature: float
    unscaled_query: bool
    def __init__(self, module: _Optional[str] = ..., order: _Optional[int] = ..., qk_norm: bool = ..., qk_temperature: _Optional[float] = ..., learn_temperature: bool = ..., chunk_size: _Optional[int] = ..., decay_horizon: _Optional[float] = ..., unscaled_query: bool = ...) -> None: ...

class ModelConfig(_message.Message):
    __slots__ = ["attention", "attention_bias", "attention_scale", "bos_token_id", "conv_kernel", "dim", "embedding_scale", "eos_token_ids", "head_dim", "logit_scale", "max_context", "mixers", "mlp_hidden", "name", "no_mlp", "no_rope", "norm_eps", "num_heads", "num_kv_heads", "num_layers", "qk_head_norm", "residual_scale", "rope_theta", "ssm_groups", "ssm_heads", "ssm_inner", "ssm_state", "tie_embeddings", "tokenizer_class", "vocab_size"]
    ATTENTION_BIAS_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_SCALE_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    CONV_KERNEL_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_SCALE_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    LOGIT_SCALE_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MIXERS_FIELD_NUMBER: _ClassVar[int]
    MLP_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NORM_EPS_FIELD_NUMBER: _ClassVar[int]
    NO_MLP_FIELD_NUMBER: _ClassVar[int]
    NO_ROPE_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    QK_HEAD_NORM_FIELD_NUMBER: _ClassVar[int]
    RESIDUAL_SCALE_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    SSM_GROUPS_FIELD_NUMBER: _ClassVar[int]
    SSM_HEADS_FIELD_NUMBER: _ClassVar[int]
    SSM_INNER_FIELD_NUMBER: _ClassVar[int]
    SSM_STATE_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_CLASS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    attention: AttentionConfig
    attention_bias: bool
    attention_scale: float
    bos_token_id: int
    conv_kernel: int
    dim: int
    embedding_scale: float
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    head_dim: int
    logit_scale: float
    max_context: int
    mixers: _containers.RepeatedScalarFieldContainer[str]
    mlp_hidden: int
    name: str
    no_mlp: bool
    no_rope: bool
    norm_eps: float
    num_heads: int
    num_kv_heads: int
    num_layers: int
    qk_head_norm: bool
    residual_scale: float
    rope_theta: float
    ssm_groups: int
    ssm_heads: int
    ssm_inner: int
    ssm_state: int
    tie_embeddings: bool
    tokenizer_class: str
    vocab_size: int
    def __init__(self, name: _Optional[str] = ..., vocab_size: _Optional[int] = ..., dim: _Optional[int] = ..., num_layers: _Optional[int] = ..., num_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., mlp_hidden: _Optional[int] = ..., rope_theta: _Optional[float] = ..., norm_eps: _Optional[float] = ..., max_context: _Optional[int] = ..., attention: _Optional[_Union[AttentionConfig, _Mapping]] = ..., num_kv_heads: _Optional[int] = ..., tie_embeddings: bool = ..., bos_token_id: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., tokenizer_class: _Optional[str] = ..., attention_bias: bool = ..., qk_head_norm: bool = ..., mixers: _Optional[_Iterable[str]] = ..., ssm_inner: _Optional[int] = ..., ssm_state: _Optional[int] = ..., ssm_heads: _Optional[int] = ..., ssm_groups: _Optional[int] = ..., conv_kernel: _Optional[int] = ..., no_mlp: bool = ..., no_rope: bool = ..., embedding_scale: _Optional[float] = ..., residual_scale: _Optional[float] = ..., logit_scale: _Optional[float] = ..., attention_scale: _Optional[float] = ...) -> None: ...
