from attnserve.v1 import model_config_pb2 as _model_config_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
FINISH_REASON_CANCELLED: FinishReason
FINISH_REASON_ERROR: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_SHUTDOWN: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_UNSPECIFIED: FinishReason
STOP_ENCODING_HEX: StopEncoding
STOP_ENCODING_UTF8: StopEncoding

class CloseSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class Constraint(_message.Message):
    __slots__ = ["json_object", "json_schema", "tool_calls"]
    JSON_OBJECT_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    json_object: bool
    json_schema: str
    tool_calls: ToolCallConstraint
    def __init__(self, json_schema: _Optional[str] = ..., json_object: bool = ..., tool_calls: _Optional[_Union[ToolCallConstraint, _Mapping]] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ["attention_module", "attention_order", "model", "ttl_seconds"]
    ATTENTION_MODULE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_ORDER_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attention_module: str
    attention_order: int
    model: str
    ttl_seconds: int
    def __init__(self, model: _Optional[str] = ..., attention_module: _Optional[str] = ..., attention_order: _Optional[int] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class DescribeModelRequest(_message.Message):
    __slots__ = ["name"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class ExportSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class Final(_message.Message):
    __slots__ = ["error", "reason", "session_id", "usage"]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    error: str
    reason: FinishReason
    session_id: str
    usage: Usage
    def __init__(self, reason: _Optional[_Union[FinishReason, str]] = ..., usage: _Optional[_Union[Usage, _Mapping]] = ..., error: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ForkSessionRequest(_message.Message):
    __slots__ = ["session_id", "ttl_seconds"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    ttl_seconds: int
    def __init__(self, session_id: _Optional[str] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class FunctionTool(_message.Message):
    __slots__ = ["name", "parameters_schema"]
    NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    name: str
    parameters_schema: str
    def __init__(self, name: _Optional[str] = ..., parameters_schema: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ["logprobs", "model", "sampling", "session_id", "text", "tokens", "top_logprobs"]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    logprobs: bool
    model: str
    sampling: SamplingParams
    session_id: str
    text: bytes
    tokens: TokenIds
    top_logprobs: int
    def __init__(self, model: _Optional[str] = ..., session_id: _Optional[str] = ..., text: _Optional[bytes] = ..., tokens: _Optional[_Union[TokenIds, _Mapping]] = ..., sampling: _Optional[_Union[SamplingParams, _Mapping]] = ..., logprobs: bool = ..., top_logprobs: _Optional[int] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ["final", "token"]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    final: Final
    token: Token
    def __init__(self, token: _Optional[_Union[Token, _Mapping]] = ..., final: _Optional[_Union[Final, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ImportSessionRequest(_message.Message):
    __slots__ = ["data", "ttl_seconds"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    ttl_seconds: int
    def __init__(self, data: _Optional[bytes] = ..., ttl_seconds: _Optional[int] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ["models"]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ["sessions"]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class MixerStateBytes(_message.Message):
    __slots__ = ["bytes_at_1k", "bytes_at_32k", "layers", "mixer"]
    BYTES_AT_1K_FIELD_NUMBER: _ClassVar[int]
    BYTES_AT_32K_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    MIXER_FIELD_NUMBER: _ClassVar[int]
    bytes_at_1k: int
    bytes_at_32k: int
    layers: int
    mixer: str
    def __init__(self, mixer: _Optional[str] = ..., layers: _Optional[int] = ..., bytes_at_1k: _Optional[int] = ..., bytes_at_32k: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ["attention_module", "break_even_context", "config", "directory", "kv_cache_type", "name", "num_kv_heads", "parameter_count", "state_bytes_by_mixer", "state_bytes_per_session_at_16k", "state_bytes_per_session_at_1k", "tokenizer", "weight_bytes", "weight_types"]
    ATTENTION_MODULE_FIELD_NUMBER: _ClassVar[int]
    BREAK_EVEN_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CONFIG_FIELD_NUMBER: _ClassVar[int]
    DIRECTORY_FIELD_NUMBER: _ClassVar[int]
    KV_CACHE_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_KV_HEADS_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_COUNT_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_BY_MIXER_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_PER_SESSION_AT_16K_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_PER_SESSION_AT_1K_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_BYTES_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_TYPES_FIELD_NUMBER: _ClassVar[int]
    attention_module: str
    break_even_context: int
    config: _model_config_pb2.ModelConfig
    directory: str
    kv_cache_type: str
    name: str
    num_kv_heads: int
    parameter_count: int
    state_bytes_by_mixer: _containers.RepeatedCompositeFieldContainer[MixerStateBytes]
    state_bytes_per_session_at_16k: int
    state_bytes_per_session_at_1k: int
    tokenizer: TokenizerInfo
    weight_bytes: int
    weight_types: str
    def __init__(self, name: _Optional[str] = ..., config: _Optional[_Union[_model_config_pb2.ModelConfig, _Mapping]] = ..., attention_module: _Optional[str] = ..., parameter_count: _Optional[int] = ..., state_bytes_per_session_at_1k: _Optional[int] = ..., state_bytes_per_session_at_16k: _Optional[int] = ..., break_even_context: _Optional[int] = ..., directory: _Optional[str] = ..., tokenizer: _Optional[_Union[TokenizerInfo, _Mapping]] = ..., num_kv_heads: _Optional[int] = ..., weight_bytes: _Optional[int] = ..., weight_types: _Optional[str] = ..., state_bytes_by_mixer: _Optional[_Iterable[_Union[MixerStateBytes, _Mapping]]] = ..., kv_cache_type: _Optional[str] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ["constraint", "ignore_eos", "max_tokens", "seed", "stop", "stop_encoding", "temperature", "top_k", "top_p"]
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    IGNORE_EOS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    STOP_ENCODING_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    constraint: Constraint
    ignore_eos: bool
    max_tokens: int
    seed: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    stop_encoding: StopEncoding
    temperature: float
    top_k: int
    top_p: float
    def __init__(self, temperature: _Optional[float] = ..., top_k: _Optional[int] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., stop_encoding: _Optional[_Union[StopEncoding, str]] = ..., ignore_eos: bool = ..., constraint: _Optional[_Union[Constraint, _Mapping]] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ["attention_module", "attention_order", "busy", "created_unix_ms", "id", "last_used_unix_ms", "model", "position", "state_bytes", "ttl_seconds"]
    ATTENTION_MODULE_FIELD_NUMBER: _ClassVar[int]
    ATTENTION_ORDER_FIELD_NUMBER: _ClassVar[int]
    BUSY_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    STATE_BYTES_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    attention_module: str
    attention_order: int
    busy: bool
    created_unix_ms: int
    id: str
    last_used_unix_ms: int
    model: str
    position: int
    state_bytes: int
    ttl_seconds: int
    def __init__(self, id: _Optional[str] = ..., model: _Optional[str] = ..., attention_module: _Optional[str] = ..., attention_order: _Optional[int] = ..., position: _Optional[int] = ..., state_bytes: _Optional[int] = ..., created_unix_ms: _Optional[int] = ..., last_used_unix_ms: _Optional[int] = ..., ttl_seconds: _Optional[int] = ..., busy: bool = ...) -> None: ...

class SnapshotChunk(_message.Message):
    __slots__ = ["data", "total_bytes"]
    DATA_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    total_bytes: int
    def __init__(self, data: _Optional[bytes] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class Token(_message.Message):
    __slots__ = ["id", "logprob", "text", "top_logprobs"]
    ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    id: int
    logprob: float
    text: bytes
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TopLogprob]
    def __init__(self, text: _Optional[bytes] = ..., id: _Optional[int] = ..., logprob: _Optional[float] = ..., top_logprobs: _Optional[_Iterable[_Union[TopLogprob, _Mapping]]] = ...) -> None: ...

class TokenIds(_message.Message):
    __slots__ = ["ids"]
    IDS_FIELD_NUMBER: _ClassVar[int]
    ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, ids: _Optional[_Iterable[int]] = ...) -> None: ...

class TokenizeRequest(_message.Message):
    __slots__ = ["model", "session_id", "text"]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    model: str
    session_id: str
    text: bytes
    def __init__(self, model: _Optional[str] = ..., session_id: _Optional[str] = ..., text: _Optional[bytes] = ...) -> None: ...

class TokenizeResponse(_message.Message):
    __slots__ = ["model", "tokens"]
    class TokenizedToken(_message.Message):
        __slots__ = ["id", "text"]
        ID_FIELD_NUMBER: _ClassVar[int]
        TEXT_FIELD_NUMBER: _ClassVar[int]
        id: int
        text: bytes
        def __init__(self, id: _Optional[int] = ..., text: _Optional[bytes] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokens: _containers.RepeatedCompositeFieldContainer[TokenizeResponse.TokenizedToken]
    def __init__(self, tokens: _Optional[_Iterable[_Union[TokenizeResponse.TokenizedToken, _Mapping]]] = ..., model: _Optional[str] = ...) -> None: ...

class TokenizerInfo(_message.Message):
    __slots__ = ["add_bos", "bos_id", "eos_ids", "kind", "vocab_size"]
    ADD_BOS_FIELD_NUMBER: _ClassVar[int]
    BOS_ID_FIELD_NUMBER: _ClassVar[int]
    EOS_IDS_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    add_bos: bool
    bos_id: int
    eos_ids: _containers.RepeatedScalarFieldContainer[int]
    kind: str
    vocab_size: int
    def __init__(self, kind: _Optional[str] = ..., vocab_size: _Optional[int] = ..., bos_id: _Optional[int] = ..., add_bos: bool = ..., eos_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class ToolCallConstraint(_message.Message):
    __slots__ = ["choice", "format", "function_name", "functions", "parallel"]
    class Choice(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = []
    CHOICE_AUTO: ToolCallConstraint.Choice
    CHOICE_FIELD_NUMBER: _ClassVar[int]
    CHOICE_NAMED: ToolCallConstraint.Choice
    CHOICE_REQUIRED: ToolCallConstraint.Choice
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    FUNCTIONS_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_FIELD_NUMBER: _ClassVar[int]
    choice: ToolCallConstraint.Choice
    format: str
    function_name: str
    functions: _containers.RepeatedCompositeFieldContainer[FunctionTool]
    parallel: bool
    def __init__(self, functions: _Optional[_Iterable[_Union[FunctionTool, _Mapping]]] = ..., choice: _Optional[_Union[ToolCallConstraint.Choice, str]] = ..., function_name: _Optional[str] = ..., parallel: bool = ..., format: _Optional[str] = ...) -> None: ...

class TopLogprob(_message.Message):
    __slots__ = ["id", "logprob", "text"]
    ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    id: int
    logprob: float
    text: bytes
    def __init__(self, text: _Optional[bytes] = ..., id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ["generated_tokens", "prompt_tokens", "session_position", "time_to_first_token_ms"]
    GENERATED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SESSION_POSITION_FIELD_NUMBER: _ClassVar[int]
    TIME_TO_FIRST_TOKEN_MS_FIELD_NUMBER: _ClassVar[int]
    generated_tokens: int
    prompt_tokens: int
    session_position: int
    time_to_first_token_ms: float
    def __init__(self, prompt_tokens: _Optional[int] = ..., generated_tokens: _Optional[int] = ..., session_position: _Optional[int] = ..., time_to_first_token_ms: _Optional[float] = ...) -> None: ...

class StopEncoding(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
