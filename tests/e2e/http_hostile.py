"""Hostile HTTP clients against a running attnserve_server's OpenAI-compatible front.

Each check is one attack from issue 29 and what a serious server answers instead:
  - bodies nested 100,000 deep (metadata, a message field, conversation items): 400, and
    the server lives on;
  - a chat of 60,000 empty assistant messages: 400 at once, naming messages;
  - schemas whose grammar work froze the engine (issue 36): each answered 200 or 400
    while another client's chat is answered as fast as alone;
  - fields the server would ignore (tools on /v1/completions, a description in
    response_format or text.format, a schema keyword outside the supported subset, in a
    format or a tool's parameters, an unknown field): 400 naming the field, never 200;
  - 80 connections from one address, and then from 80 addresses, each sending a header
    line every 2 s: /health keeps answering within 2 s, and the slow connections are
    closed once --http_request_timeout has passed.
Driven by http_hostile_test.sh, which starts the server.

Usage: http_hostile.py HTTP_PORT REQUEST_TIMEOUT_SECONDS [SECTION,...] [--tls_ca=PEM]
(sections: deep, messages, fields, grammar, slow; all by default). With --tls_ca the port is
HTTPS: /health is asked over TLS, and the slow clients are TCP connections that send a
few bytes of a handshake every 2 s and never finish it.
"""
import http.client
import json
import socket
import ssl
import sys
import threading
import time

failures = []
checked = 0
tls = None  # an ssl.SSLContext trusting --tls_ca, when the port is HTTPS


def check(ok, what):
    global checked
    checked += 1
    if not ok:
        failures.append(what)
        print(f"FAIL: {what}", file=sys.stderr)


def request(port, method, path, body=None, timeout=20, source="127.0.0.1"):
    """(status, parsed JSON body or text, seconds taken)."""
    if tls is None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout,
                                          source_address=(source, 0))
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=timeout,
                                           source_address=(source, 0), context=tls)
    start = time.monotonic()
    data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
    conn.request(method, path, body=data, headers={"content-type": "application/json"})
    resp = conn.getresponse()
    raw = resp.read()
    conn.close()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw.decode(errors="replace")
    return resp.status, parsed, time.monotonic() - start


def param_of(body):
    return body.get("error", {}).get("param") if isinstance(body, dict) else None


def health_ok(port, source="127.0.0.1", within=2.0):
    try:
        status, _, took = request(port, "GET", "/health", timeout=within, source=source)
        return status == 200 and took <= within, f"{status} in {took:.2f} s"
    except OSError as e:
        return False, f"no answer ({e})"


def deep_bodies(port):
    deep = "[" * 100000 + "]" * 100000
    bodies = [
        ("/v1/responses", '{"input":"hi","metadata":{"k":%s}}' % deep),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":%s}]}' % deep),
        ("/v1/chat/completions", '{"messages":[{"role":"user","content":"x","y":%s}]}' % deep),
        ("/v1/conversations", '{"items":%s}' % deep),
        ("/v1/completions", '{"prompt":"x","stop":%s}' % deep),
    ]
    for path, body in bodies:
        try:
            status, parsed, _ = request(port, "POST", path, body.encode())
        except OSError as e:
            status, parsed = None, f"no answer ({e})"
        check(status == 400 and "nests deeper" in json.dumps(parsed),
              f"{path} with a body nested 100,000 deep: {status} {str(parsed)[:200]}")
        ok, how = health_ok(port)
        check(ok, f"/health after a deep body on {path}: {how}")


def many_messages(port):
    messages = [{"role": "user", "content": "hi"}] + [{"role": "assistant"}] * 60000
    try:
        status, parsed, took = request(port, "POST", "/v1/chat/completions",
                                       {"messages": messages, "max_tokens": 1}, timeout=25)
    except OSError as e:
        status, parsed, took = None, f"no answer ({e})", 25.0
    check(status == 400 and param_of(parsed) == "messages",
          f"60,000 empty assistant messages: {status} {str(parsed)[:200]}")
    print(f"60,000 empty assistant messages: {status} in {took:.3f} s")


def ignored_fields(port):
    tool = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    bad_tool = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}}}]
    user = [{"role": "user", "content": "In the beginning"}]
    cases = [
        ("/v1/chat/completions",
         {"messages": user, "tools": bad_tool, "tool_choice": "required", "max_tokens": 2}, "tools"),
        ("/v1/chat/completions",
         {"messages": user, "tools": tool, "tool_choice": "required", "max_tokens": 2,
          "frequency_penalty": 1}, "frequency_penalty"),
        ("/v1/responses", {"input": "hi", "tools": [dict(bad_tool[0]["function"], type="function")],
                           "max_output_tokens": 2}, "tools"),
        ("/v1/chat/completions",
         {"messages": user, "max_tokens": 2, "response_format":
          {"type": "json_schema", "json_schema": {"name": "x", "description": "d",
                                                  "schema": {"type": "object"}}}},
         "response_format.json_schema.description"),
        ("/v1/chat/completions",
         {"messages": user, "max_tokens": 2, "response_format":
          {"type": "json_schema", "json_schema": {"name": "x", "schema": {
              "type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}}}}},
         "response_format"),
        ("/v1/responses",
         {"input": "hi", "max_output_tokens": 2, "text":
          {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"},
                      "description": "d"}}}, "text.format.description"),
        ("/v1/responses",
         {"input": "hi", "max_output_tokens": 2, "text":
          {"format": {"type": "json_schema", "name": "x", "schema": {"type": "integer", "multipleOf": 7}}}},
         "text.format"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "tools": tool}, "tools"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "frobnicate": True}, "frobnicate"),
        ("/v1/completions", {"prompt": "hi", "max_tokens": 2, "presence_penalty": 1.5},
         "presence_penalty"),
    ]
    for path, body, param in cases:
        status, parsed, _ = request(port, "POST", path, body)
        check(status == 400 and param_of(parsed) == param,
              f"{path} with {param}: {status} {str(parsed)[:200]}")
    # The same requests without those fields are served.
    status, parsed, _ = request(port, "POST", "/v1/chat/completions",
                                {"messages": user, "max_tokens": 2, "tools": [],
                                 "response_format": {"type": "text"}})
    check(status == 200, f"a chat with no-op tools and response_format: {status} {str(parsed)[:200]}")


class SlowClient:
    """A connection that sends a request head one header line every 2 s, never ending it."""

    def __init__(self, port, source):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5,
                                             source_address=(source, 0))
        # Over TLS: the start of a handshake record, never completed.
        self.sock.sendall(b"\x16\x03\x01" if tls else
                          b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\n")
        self.closed_at = None

    def tick(self, now):
        if self.closed_at is not None:
            return
        try:
            self.sock.sendall(b"\x02" if tls else b"x-slow: %d\r\n" % int(now))
            self.sock.setblocking(False)
            try:
                if self.sock.recv(4096) == b"":
                    self.closed_at = now
            except BlockingIOError:
                pass
            finally:
                self.sock.setblocking(True)
        except OSError:
            self.closed_at = now


def slow_clients(port, sources, request_timeout, label):
    clients = [SlowClient(port, s) for s in sources]
    start = time.monotonic()
    worst = 0.0
    answered = 0
    # Longer than the request deadline, so the closing is seen too.
    while time.monotonic() - start < request_timeout + 4:
        now = time.monotonic()
        for c in clients:
            c.tick(now)
        ok, how = health_ok(port, within=2.0)
        check(ok, f"/health beside {len(clients)} slow clients ({label}) at "
                  f"{now - start:.1f} s: {how}")
        answered += ok
        try:
            worst = max(worst, float(how.split(" in ")[1].split()[0]))
        except (IndexError, ValueError):
            worst = 99.0
        time.sleep(max(0.0, 2.0 - (time.monotonic() - now)))
    open_after = sum(1 for c in clients if c.closed_at is None)
    check(open_after == 0,
          f"{open_after} of {len(clients)} slow connections ({label}) still open "
          f"{request_timeout + 4:.0f} s after their first byte")
    print(f"{len(clients)} slow clients ({label}): /health answered {answered} times, "
          f"slowest {worst:.3f} s; {open_after} slow connections left open")
    for c in clients:
        c.sock.close()


def grammar_attacks(port):
    """Schemas whose grammar work froze the engine for every client (issue 36): each is
    answered (200 or 400) while another client's chat is answered as fast as it is alone,
    give or take a machine's noise (the turn that waited 42.8 s behind the first of them
    is far outside the bound)."""
    user = [{"role": "user", "content": "In the beginning"}]

    def fmt(schema):
        return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}

    defs = {f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
            for i in range(40)}
    defs["d40"] = {"type": "integer"}
    many = {f"p{i}": {"type": "integer"} for i in range(1101)}
    # Two array branches at every level: 2^depth distinct parses of "[[[[...".
    growing = {"$ref": "#/$defs/x", "$defs": {"x": {"anyOf": [
        {"type": "array", "items": {"$ref": "#/$defs/x"}},
        {"type": "array", "items": {"$ref": "#/$defs/x"}, "maxItems": 3}]}}}
    attacks = [
        ("pattern (?:|){27}", {"type": "string", "pattern": "^(?:|){27}$"}, {200}),
        ("pattern (?:|){40}", {"type": "string", "pattern": "^(?:|){40}$"}, {200}),
        ("40 nested anyOf of two equal $refs", {"$ref": "#/$defs/d0", "$defs": defs}, {200}),
        ("1,101 optional properties",
         {"type": "object", "properties": many, "additionalProperties": False}, {200}),
        ("an anyOf whose parses double with every byte", growing, {400}),
    ]

    def chat_seconds():
        status, parsed, took = request(
            port, "POST", "/v1/chat/completions", {"messages": user, "max_tokens": 4})
        check(status == 200, f"a plain chat: {status} {str(parsed)[:200]}")
        return took

    alone = sorted(chat_seconds() for _ in range(3))[1]
    for name, schema, expect in attacks:
        answer = {}

        def attack():
            answer["reply"] = request(port, "POST", "/v1/chat/completions",
                                      {"messages": user, "max_tokens": 16,
                                       "response_format": fmt(schema)}, timeout=60)

        thread = threading.Thread(target=attack)
        thread.start()
        beside = chat_seconds()
        thread.join(timeout=90)
        status, parsed, took = answer.get("reply", (None, "no answer", 90.0))
        check(status in expect, f"{name}: {status} {str(parsed)[:300]}")
        if status == 400:
            check(param_of(parsed) == "response_format", f"{name}: refused naming {param_of(parsed)}")
        if status == 200:
            text = parsed["choices"][0]["message"]["content"]
            reason = parsed["choices"][0]["finish_reason"]
            check(reason in ("stop", "length"), f"{name}: finish_reason {reason}")
            if reason == "stop":
                try:
                    json.loads(text)
                except ValueError:
                    check(False, f"{name}: a finished answer that is not JSON: {text!r}")
        check(beside < 10 * alone + 3.0,
              f"{name}: a chat beside it took {beside:.2f} s, alone {alone:.2f} s")
        print(f"{name}: {status} in {took:.2f} s; a chat beside it {beside:.2f} s "
              f"(alone {alone:.2f} s)")


def main():
    global tls
    args = [a for a in sys.argv[1:] if not a.startswith("--tls_ca=")]
    for a in sys.argv[1:]:
        if a.startswith("--tls_ca="):
            tls = ssl.create_default_context(cafile=a.split("=", 1)[1])
            tls.check_hostname = False
    port, request_timeout = int(args[0]), float(args[1])
    sections = (args[2].split(",") if len(args) > 2
                else ["deep", "messages", "fields", "grammar", "slow"])
    if "deep" in sections:
        deep_bodies(port)
    if "messages" in sections:
        many_messages(port)
    if "fields" in sections:
        ignored_fields(port)
    if "grammar" in sections:
        grammar_attacks(port)
    if "slow" in sections:
        slow_clients(port, ["127.0.0.2"] * 80, request_timeout, "one address")
        slow_clients(port, [f"127.0.1.{i}" for i in range(1, 81)], request_timeout, "80 addresses")
    ok, how = health_ok(port)
    check(ok, f"/health at the end: {how}")
    print(f"{checked - len(failures)} passed, {len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
