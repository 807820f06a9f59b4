"""Generation: the stream of one Generate call."""
import grpc

from . import _rpc
from .v1 import attnserve_pb2 as pb


class Generation:
    """One turn, streamed: iterating yields each generated token as it arrives, an
    attnserve.v1.attnserve_pb2.Token (`.text` bytes, possibly part of a UTF-8
    character; `.id`; `.logprob` and `.top_logprobs` when asked for). When the stream
    has ended, `final` holds the final message (`.reason`, `.usage`, `.error`,
    `.session_id`); `result()` reads whatever is left and returns it.

        g = client.generate("In the beginning", max_tokens=40)
        for token in g:
            sys.stdout.buffer.write(token.text)
        print(g.finish_reason, g.usage.generated_tokens)

    A call refused before its first token (UNAVAILABLE, or CANCELLED by a stopping
    replica) is sent again under the Client's retry rule; an error status raises
    attnserve.Error from the iteration. A turn that ends without a status error still
    tells how in `final.reason`: stop and length are normal ends, error (see
    `final.error`), cancelled and shutdown are not. Used as a context manager, leaving
    the block cancels a turn still running.
    """

    def __init__(self, stub, request, timeout, retry):
        self.request = request  # the GenerateRequest sent
        self.final = None       # the Final message, once the stream has ended
        self.token_count = 0    # tokens received so far
        self._stub, self._timeout, self._retry = stub, timeout, retry
        self._chunks = []
        self._call = None
        self._cancelled = False
        self._tokens = self._stream()

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._tokens)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.final is None:
            self.cancel()
        return False

    def _stream(self):
        backoff = _rpc.Backoff(self._timeout, self._retry)
        metadata = _rpc.routed(self.request.session_id)
        while True:
            try:
                self._call = self._stub.Generate(self.request, timeout=backoff.left(),
                                                 metadata=metadata)
                for response in self._call:
                    if response.HasField("final"):
                        self.final = response.final
                    else:
                        self.token_count += 1
                        self._chunks.append(response.token.text)
                        yield response.token
                return
            except grpc.RpcError as error:
                if self._cancelled:
                    return
                # After a token the same request would append its prompt twice.
                if not backoff.again(error, self.token_count == 0):
                    raise _rpc.Error.from_rpc(error) from None

    def result(self):
        """Reads the rest of the stream; returns the Final message (None when the stream
        was cancelled or ended without one). `text` then holds the whole reply."""
        for _ in self:
            pass
        return self.final

    def cancel(self):
        """Cancels the call: the server stops the turn (the session keeps the tokens
        generated so far) and the iteration ends."""
        self._cancelled = True
        if self._call is not None and hasattr(self._call, "cancel"):
            self._call.cancel()

    @property
    def text(self):
        """The bytes of every token received so far (the whole reply after result())."""
        return b"".join(self._chunks)

    @property
    def finish_reason(self):
        """"stop", "length", "cancelled", "error" or "shutdown"; None before the end."""
        if self.final is None:
            return None
        return pb.FinishReason.Name(self.final.reason).removeprefix("FINISH_REASON_").lower()

    @property
    def usage(self):
        """The final message's Usage (prompt_tokens, generated_tokens, session_position,
        time_to_first_token_ms); None before the end."""
        return None if self.final is None else self.final.usage
