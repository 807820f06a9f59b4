"""The gRPC channel of a Client: plaintext or TLS, with the API key on every call."""
import collections
import os

import grpc

# Reconnect within a second, as the C++ client does: gRPC's default backoff (1 s, then
# 1.6x) would fail the retries fast for seconds after a restarted server is back.
RECONNECT = (("grpc.initial_reconnect_backoff_ms", 100),
             ("grpc.min_reconnect_backoff_ms", 100), ("grpc.max_reconnect_backoff_ms", 1000))


class _CallDetails(collections.namedtuple(
        "_CallDetails", ("method", "timeout", "metadata", "credentials", "wait_for_ready",
                         "compression")), grpc.ClientCallDetails):
    pass


class _Bearer(grpc.UnaryUnaryClientInterceptor, grpc.UnaryStreamClientInterceptor,
              grpc.StreamUnaryClientInterceptor, grpc.StreamStreamClientInterceptor):
    """Adds `authorization: Bearer KEY` to every call, as the C++ client does (an
    interceptor, so TLS is not required for it)."""

    def __init__(self, key):
        self._header = ("authorization", f"Bearer {key}")

    def _with_key(self, d):
        return _CallDetails(d.method, d.timeout, tuple(d.metadata or ()) + (self._header,),
                            d.credentials, getattr(d, "wait_for_ready", None),
                            getattr(d, "compression", None))

    def intercept_unary_unary(self, continuation, details, request):
        return continuation(self._with_key(details), request)

    intercept_unary_stream = intercept_unary_unary
    intercept_stream_unary = intercept_unary_unary
    intercept_stream_stream = intercept_unary_unary


def _pem(value):
    """PEM bytes given as bytes, or read from a path; None stays None."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return value
    with open(os.fspath(value), "rb") as file:
        return file.read()


def open_channel(target, api_key=None, tls=False, tls_cert=None, tls_key=None,
                 tls_server_name=None, options=()):
    """A channel to target (Client's arguments). TLS when tls is set or any other tls_*
    argument is: tls=True or a client certificate alone verifies the server with
    grpcio's roots, tls=PATH or PEM bytes with those CA certificates."""
    options = tuple(dict(RECONNECT + tuple(options)).items())  # later keys win
    if not (tls or tls_cert or tls_key or tls_server_name):
        channel = grpc.insecure_channel(target, options=options)
    else:
        if bool(tls_cert) != bool(tls_key):
            raise ValueError("tls_cert and tls_key go together (the client certificate "
                             "and its key)")
        roots = None if isinstance(tls, bool) or tls is None else _pem(tls)
        credentials = grpc.ssl_channel_credentials(roots, _pem(tls_key), _pem(tls_cert))
        if tls_server_name:
            options += (("grpc.ssl_target_name_override", tls_server_name),)
        channel = grpc.secure_channel(target, credentials, options=options)
    if api_key:
        channel = grpc.intercept_channel(channel, _Bearer(api_key))
    return channel
