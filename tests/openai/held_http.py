#!/usr/bin/env python3
"""A streamed chat completion (or, with a conversation id, a streamed response in that
conversation) whose reader the test holds: it sends the request on a
socket with a 4 KiB receive buffer, reads the response head and the first event, then
reads nothing until the file RELEASE exists, so the server's writes stop completing
after a few hundred tokens and the turn pauses with its sink full instead of running
on (a turn of more tokens than the buffers hold). Then it reads to the end and checks
the stream's framing: it ends with `data: [DONE]` (a response: with its
response.completed or response.incomplete event).

Prints `status=CODE events=N done=yes|no` on stdout when the response ends.
Usage: held_http.py RELEASE HOST:PORT MAX_TOKENS [SESSION_ID | conv_ID]
"""
import json
import os
import socket
import sys
import time

release, addr, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
session = sys.argv[4] if len(sys.argv) > 4 else ""
conversation = session if session.startswith("conv_") else ""
if conversation:
    session = ""
host, port = addr.rsplit(":", 1)
if conversation:
    path = "/v1/responses"
    body = json.dumps({"input": "In the beginning", "conversation": conversation,
                       "max_output_tokens": max_tokens, "temperature": 0,
                       "stream": True}).encode()
else:
    path = "/v1/chat/completions"
    body = json.dumps({"messages": [{"role": "user", "content": "In the beginning"}],
                       "max_tokens": max_tokens, "temperature": 0, "stream": True}).encode()
head = (f"POST {path} HTTP/1.1\r\nHost: {addr}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        + (f"x-session-id: {session}\r\n" if session else "")
        + "Connection: close\r\n\r\n").encode()

s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: the window
s.connect((host, int(port)))
s.sendall(head + body)
data = b""
while b"\r\n\r\n" not in data or b"\n\n" not in data.split(b"\r\n\r\n", 1)[1]:
    chunk = s.recv(1024)
    if not chunk:
        break
    data += chunk
status = int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/1.1 ") else 0
sys.stderr.write(f"held_http: status {status}, holding\n")
sys.stderr.flush()
while not os.path.exists(release):
    time.sleep(0.01)
while True:
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
payload = data.split(b"\r\n\r\n", 1)[1] if b"\r\n\r\n" in data else b""
# The body is chunked (Transfer-Encoding): count events on the joined text; the framing
# itself is checked byte for byte by sdk_test.sh with curl.
events = payload.count(b"data: ")
if conversation:
    done = b"event: response.completed\n" in payload or b"event: response.incomplete\n" in payload
else:
    done = b"data: [DONE]\n\n" in payload
print(f"status={status} events={events} done={'yes' if done else 'no'}", flush=True)
