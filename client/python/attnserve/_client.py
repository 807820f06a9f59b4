"""Client: the calls of attnserve.v1.AttnServe as Python methods."""
import io
import os

import grpc

from . import _rpc
from ._channel import open_channel
from ._generation import Generation
from .v1 import attnserve_pb2 as pb
from .v1 import attnserve_pb2_grpc as pb_grpc

UNARY_TIMEOUT = 10.0    # seconds: the default deadline of a call that streams nothing
STREAM_TIMEOUT = 300.0  # seconds: of a turn, an export or an import
CHUNK = 1 << 20         # import sends at most this many snapshot bytes per message
_SAMPLING = frozenset(pb.SamplingParams.DESCRIPTOR.fields_by_name)


def _id(session):
    """A session id given as the id or as a Session message."""
    return session if isinstance(session, str) else session.id


class Client:
    """A connection to an attnserve server (gRPC, attnserve.v1.AttnServe).

    target: "HOST:PORT"; None reads ATTNSERVE_SERVER, else 127.0.0.1:50051.
    api_key: sent as `authorization: Bearer KEY` on every call (servers run with
        --api_keys_file); None reads ATTNSERVE_API_KEY, "" sends none.
    tls: False (plaintext), True (verify the server with grpcio's root certificates),
        or the path (or PEM bytes) of the CA certificates that verify it.
    tls_cert, tls_key: a client certificate and its key (paths or PEM bytes) for a
        server with --tls_client_ca; they imply TLS.
    tls_server_name: the name the server's certificate must carry, if not target's host.
    retry: send a call the server refused with UNAVAILABLE (a replica draining, the
        session busy on another one) or cancelled while stopping again, as the C++
        client does: up to 8 attempts, waiting 50 ms, 100 ms, 200 ms, ... (+-20%) within
        10 s and the call's timeout; a turn only before its first token, an export
        before its first chunk, an import only from bytes or a seekable file.
    options: extra gRPC channel options, (name, value) pairs.

    Methods raise attnserve.Error (with .code, a grpc.StatusCode, and .details) for an
    error status; messages are attnserve.v1.attnserve_pb2's. A Client is a context
    manager; close() closes its channel.
    """

    def __init__(self, target=None, api_key=None, tls=False, *, tls_cert=None,
                 tls_key=None, tls_server_name=None, retry=True, options=()):
        self.target = target or os.environ.get("ATTNSERVE_SERVER") or "127.0.0.1:50051"
        if api_key is None:
            api_key = os.environ.get("ATTNSERVE_API_KEY", "")
        self.retry = retry
        self.channel = open_channel(self.target, api_key, tls, tls_cert, tls_key,
                                    tls_server_name, options)
        self.stub = pb_grpc.AttnServeStub(self.channel)  # the raw stub, for any other use
        self.sessions = Sessions(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def close(self):
        self.channel.close()

    def wait_ready(self, timeout):
        """Waits up to timeout seconds for the connection; raises Error (UNAVAILABLE)
        when there is none by then. Calls do not need it: it tells a server that is not
        there from one that refuses."""
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise _rpc.Error(grpc.StatusCode.UNAVAILABLE,
                             f"no connection to {self.target} within {timeout:g} s") from None

    def _unary(self, method, request, timeout, session_id=""):
        return _rpc.call(lambda seconds: method(request, timeout=seconds,
                                                metadata=_rpc.routed(session_id)),
                         timeout, self.retry)

    def generate(self, text=None, *, model="", session="", tokens=None, logprobs=False,
                 top_logprobs=0, timeout=STREAM_TIMEOUT, **sampling):
        """Starts a turn; returns its Generation (iterate it for the tokens).

        text: the prompt, str (sent as UTF-8) or bytes; tokens: token ids instead; None
            of both continues a session with no new text.
        model: the model's name ("" for the server's default; a session has its own).
        session: a session id (or Session) to continue; "" runs a one-turn session.
        sampling: SamplingParams fields: temperature (0 greedy), top_k, top_p, seed,
            max_tokens (0: the server's default), stop (str, bytes or a list of them),
            stop_encoding, ignore_eos.
        logprobs, top_logprobs: the model's log p of each token and of its top_logprobs
            most likely alternatives (Token.logprob, Token.top_logprobs).
        """
        unknown = sorted(set(sampling) - _SAMPLING)
        if unknown:
            raise TypeError(f"generate() got unexpected keyword arguments: {unknown}")
        stop = sampling.pop("stop", None)
        params = pb.SamplingParams(**sampling)
        if stop is not None:
            stop = [stop] if isinstance(stop, (str, bytes)) else list(stop)
            if any(isinstance(s, bytes) for s in stop):  # bytes travel as hex
                params.stop_encoding = pb.STOP_ENCODING_HEX
                stop = [(s if isinstance(s, bytes) else s.encode()).hex() for s in stop]
            params.stop.extend(stop)
        request = pb.GenerateRequest(model=model, session_id=_id(session), sampling=params,
                                     logprobs=logprobs, top_logprobs=top_logprobs)
        if text is not None:
            request.text = text.encode() if isinstance(text, str) else bytes(text)
        elif tokens is not None:
            request.tokens.ids.extend(tokens)
        return Generation(self.stub, request, timeout, self.retry)

    def models(self, *, timeout=UNARY_TIMEOUT):
        """The served models: a list of ModelInfo (name, config, attention_module,
        state_bytes_per_session_at_1k, tokenizer, ...)."""
        return list(self._unary(self.stub.ListModels, pb.ListModelsRequest(), timeout).models)

    def describe_model(self, name="", *, timeout=UNARY_TIMEOUT):
        """One model's ModelInfo ("" for the server's default)."""
        return self._unary(self.stub.DescribeModel, pb.DescribeModelRequest(name=name),
                           timeout)

    def tokenize(self, text, *, model="", session="", timeout=UNARY_TIMEOUT):
        """The TokenizeResponse of text (str or bytes) for a model, or as a session's
        next turn: `.tokens` (id and text of each), `.model`."""
        request = pb.TokenizeRequest(model=model, session_id=_id(session),
                                     text=text.encode() if isinstance(text, str) else text)
        return self._unary(self.stub.Tokenize, request, timeout, request.session_id)


class Sessions:
    """client.sessions: sessions kept by the server between turns. A session argument
    is an id or a Session message; methods return attnserve_pb2.Session messages (id,
    model, position, state_bytes, ttl_seconds, ...)."""

    def __init__(self, client):
        self._client = client

    def _unary(self, name, request, timeout, session_id=""):
        return self._client._unary(getattr(self._client.stub, name), request, timeout,
                                   session_id)

    def create(self, model="", *, ttl_seconds=0, attention_module="", attention_order=0,
               timeout=UNARY_TIMEOUT):
        """A new, empty session (ttl_seconds 0: the server's default idle lifetime).
        A replica that created it and then failed leaves an orphan, closed by its TTL."""
        request = pb.CreateSessionRequest(model=model, ttl_seconds=ttl_seconds,
                                          attention_module=attention_module,
                                          attention_order=attention_order)
        return self._unary("CreateSession", request, timeout)

    def get(self, session, *, timeout=UNARY_TIMEOUT):
        sid = _id(session)
        return self._unary("GetSession", pb.GetSessionRequest(session_id=sid), timeout, sid)

    def list(self, *, timeout=UNARY_TIMEOUT):
        """The caller's sessions (its tenant's, with API keys)."""
        return list(self._unary("ListSessions", pb.ListSessionsRequest(), timeout).sessions)

    def close(self, session, *, timeout=UNARY_TIMEOUT):
        sid = _id(session)
        self._unary("CloseSession", pb.CloseSessionRequest(session_id=sid), timeout, sid)

    def fork(self, session, *, ttl_seconds=0, timeout=UNARY_TIMEOUT):
        """A new session with a copy of session's state (ttl_seconds 0: the original's)."""
        sid = _id(session)
        request = pb.ForkSessionRequest(session_id=sid, ttl_seconds=ttl_seconds)
        return self._unary("ForkSession", request, timeout, sid)

    def export(self, session, file=None, *, timeout=STREAM_TIMEOUT):
        """The session's snapshot (proto/attnserve/v1/SNAPSHOT.md): returned as bytes,
        or written chunk by chunk to file (a binary file object), returning the number
        of bytes written. Raises Error (DATA_LOSS) when the stream ends short of the
        size the server announced; an OSError of file.write passes through."""
        sid = _id(session)
        out = io.BytesIO() if file is None else file
        total, received = None, 0

        def attempt(seconds):
            nonlocal total, received
            for chunk in self._client.stub.ExportSession(
                    pb.ExportSessionRequest(session_id=sid), timeout=seconds,
                    metadata=_rpc.routed(sid)):
                total = chunk.total_bytes if total is None else total
                out.write(chunk.data)
                received += len(chunk.data)

        _rpc.call(attempt, timeout, self._client.retry, lambda: total is None)
        if total and received != total:
            raise _rpc.Error(grpc.StatusCode.DATA_LOSS, f"the export of {sid} ended "
                             f"after {received} of {total} bytes")
        return out.getvalue() if file is None else received

    def import_(self, snapshot, *, ttl_seconds=0, timeout=STREAM_TIMEOUT):
        """A new session from a snapshot: bytes, or a binary file object read from its
        current position (sent again after a refusal only when seekable). Sent in
        messages of at most 1 MiB. Returns the new Session; an OSError reading the file
        passes through."""
        read_error = []
        if isinstance(snapshot, (bytes, bytearray, memoryview)):
            data = memoryview(snapshot)
            rewindable = True

            def read(offset):
                return bytes(data[offset:offset + CHUNK])
        else:
            try:
                rewindable = snapshot.seekable() and snapshot.fileno() >= 0
                start = snapshot.tell() if rewindable else 0
            except (AttributeError, OSError, io.UnsupportedOperation):
                rewindable = False

            def read(offset):  # pread: a refused attempt's thread may still be reading
                if rewindable:
                    return os.pread(snapshot.fileno(), CHUNK, start + offset)
                return snapshot.read(CHUNK)

        def requests():  # on a gRPC thread: a read error ends the stream, raised below
            first, offset = True, 0
            while True:
                try:
                    data = read(offset)
                except OSError as error:
                    return read_error.append(error)
                if not data and not first:  # an empty snapshot still sends one message
                    return
                offset += len(data)
                yield pb.ImportSessionRequest(data=data,
                                              ttl_seconds=ttl_seconds if first else 0)
                first = False

        try:  # a replica that imported and then failed leaves an orphan, as with create
            return _rpc.call(lambda seconds: self._client.stub.ImportSession(
                requests(), timeout=seconds), timeout, self._client.retry,
                lambda: rewindable and not read_error)
        finally:
            if read_error:
                raise read_error[0]
