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
    __slots__ = ["attention", "bos_token_id", "dim", "eos_token_ids", "head_dim", "max_context", "mlp_hidden", "name", "norm_eps", "num_heads", "num_kv_heads", "num_layers", "rope_theta", "tie_embeddings", "tokenizer_class", "vocab_size"]
    ATTENTION_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    DIM_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    HEAD_DIM_FIELD_NUMBER: _ClassVar[int]
    MAX_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    MLP_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NORM_EPS_FIELD_NUMBER: _ClassVar[int]
    NUM_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    NUM_LAYERS_FIELD_NUMBER: _ClassVar[int]
    ROPE_THETA_FIELD_NUMBER: _ClassVar[int]
    TIE_EMBEDDINGS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_CLASS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    attention: AttentionConfig
    bos_token_id: int
    dim: int
    eos_token_ids: _containers.RepeatedScalarFieldContainer[int]
    head_dim: int
    max_context: int
    mlp_hidden: int
    name: str
    norm_eps: float
    num_heads: int
    num_kv_heads: int
    num_layers: int
    rope_theta: float
    tie_embeddings: bool
    tokenizer_class: str
    vocab_size: int
    def __init__(self, name: _Optional[str] = ..., vocab_size: _Optional[int] = ..., dim: _Optional[int] = ..., num_layers: _Optional[int] = ..., num_heads: _Optional[int] = ..., head_dim: _Optional[int] = ..., mlp_hidden: _Optional[int] = ..., rope_theta: _Optional[float] = ..., norm_eps: _Optional[float] = ..., max_context: _Optional[int] = ..., attention: _Optional[_Union[AttentionConfig, _Mapping]] = ..., num_kv_heads: _Optional[int] = ..., tie_embeddings: bool = ..., bos_token_id: _Optional[int] = ..., eos_token_ids: _Optional[_Iterable[int]] = ..., tokenizer_class: _Optional[str] = ...) -> None: ...
