#!/usr/bin/env python3
"""Prints the three `tcp-check send-binary` hex strings of deploy/haproxy/haproxy.cfg.

HAProxy 2.6 cannot send a gRPC health check with `http-check`: a gRPC request body is a
5-byte frame header that starts with NUL bytes, and `http-check send body`/`body-lf`
stop at the first NUL (the request goes out with an empty body, the server answers
HTTP 200 with grpc-status 13 in the headers, and `http-check expect status 200` passes
even while the replica says NOT_SERVING). So the check speaks HTTP/2 itself, as raw
bytes over a plain TCP health-check connection:

  1. the client connection preface and an empty SETTINGS frame;
  2. a HEADERS frame (END_HEADERS) on stream 1, HPACK without Huffman coding or
     indexing: :method POST, :scheme http, :path /grpc.health.v1.Health/Check,
     :authority haproxy (gRPC refuses a request without one), content-type
     application/grpc, te trailers;
  3. a DATA frame (END_STREAM) carrying an empty HealthCheckRequest: gRPC frame header
     00 00000000 (not compressed, length 0) -- service "" is the whole server.

The server answers a DATA frame whose payload is the HealthCheckResponse
00 00000002 08 0S: length 2, field 1 (status) = S, 1 SERVING, 2 NOT_SERVING. The
config waits for any status (`rbinary 000000000208(01|02|03)`), then requires
`binary 00000000020801` with `min-recv 0`, so a draining replica fails its check at
once (reason "health is not SERVING") instead of timing out.

Usage: grpc_health_check.py [AUTHORITY]   (tests/e2e compare its output with the configs)
"""
import sys


def frame(kind, flags, stream, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + \
        stream.to_bytes(4, "big") + payload


def literal(name_index, value):
    # Literal header field without indexing, indexed name (RFC 7541 6.2.2).
    prefix = bytes([name_index]) if name_index < 15 else bytes([0x0F, name_index - 15])
    return prefix + bytes([len(value)]) + value


def main():
    authority = (sys.argv[1] if len(sys.argv) > 1 else "haproxy").encode()
    path = b"/grpc.health.v1.Health/Check"
    block = (bytes([0x83, 0x86])            # :method POST, :scheme http (static table)
             + literal(4, path)             # :path
             + literal(1, authority)        # :authority
             + literal(31, b"application/grpc")  # content-type
             + b"\x00\x02te\x08trailers")   # te: trailers (new name)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(0x4, 0, 0, b"")
    headers = frame(0x1, 0x4, 1, block)
    data = frame(0x0, 0x1, 1, b"\x00\x00\x00\x00\x00")
    for part in (preface, headers, data):
        print(part.hex())


if __name__ == "__main__":
    main()
