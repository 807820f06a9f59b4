"""attnserve: a Python client for attnserve servers (gRPC, attnserve.v1.AttnServe).

    import attnserve
    with attnserve.Client("127.0.0.1:50051") as client:
        for token in client.generate("In the beginning", max_tokens=40):
            print(token.text.decode(errors="replace"), end="", flush=True)

Client (generate, models, describe_model, tokenize, sessions: create, get, list, close,
export, import_, fork), Generation (the stream of one turn), Error (an error status:
.code, .details). The messages are attnserve.v1.attnserve_pb2's. `attnserve` (or
`python3 -m attnserve`) is the command line (attnserve.cli).
"""
from ._client import Client, Sessions
from ._generation import Generation
from ._rpc import Error

__all__ = ["Client", "Error", "Generation", "Sessions"]
__version__ = "0.1.0"
