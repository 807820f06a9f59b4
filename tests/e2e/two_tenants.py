"""Two tenants on one server's HTTP API: tenant B's burst (chat completions, then
conversations with a stored response each) must leave every stored response and
conversation of tenant A usable, and B must meet its quota as 429 with a message.

Usage: two_tenants.py BASE_URL KEY_A KEY_B CHATS CONVERSATIONS LABEL
Prints one line of figures; exits 1 with the reason on the first broken promise.
"""
import json
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

base, key_a, key_b = sys.argv[1], sys.argv[2], sys.argv[3]
chats, conversations, label = int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]


def call(method, path, key, body=None):
    """(status, parsed body) of one request."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("Authorization", "Bearer " + key)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def must(what, status, body, want=200):
    if status != want:
        sys.exit(f"{label}: {what}: HTTP {status}, expected {want}: {body}")
    return body


def respond(key, text, **extra):
    body = {"input": text, "max_output_tokens": 2, "temperature": 0}
    body.update(extra)
    return call("POST", "/v1/responses", key, body)


start = time.monotonic()
# Tenant A: a chain of two stored responses and a conversation with one answer.
a1 = must("A: first response", *respond(key_a, "In the beginning"))["id"]
a2 = must("A: continuation", *respond(key_a, " and then", previous_response_id=a1))["id"]
conv_a = must("A: conversation", *call("POST", "/v1/conversations", key_a, {}))["id"]
must("A: response in its conversation", *respond(key_a, "Hello", conversation=conv_a))

# Tenant B: many chat completions (each keeps a chat state), several at once.
def chat(i):
    return call("POST", "/v1/chat/completions", key_b,
                {"messages": [{"role": "user", "content": f"Tell me number {i}"}],
                 "max_tokens": 2, "temperature": 0})

with ThreadPoolExecutor(max_workers=4) as pool:
    chat_replies = list(pool.map(chat, range(chats)))
chat_codes = [status for status, _ in chat_replies]
generated = sum(body["usage"]["completion_tokens"] for status, body in chat_replies
                if status == 200)
chat_end = time.monotonic()

# Tenant B: conversations, each with one stored response, until its quota says no.
conv_codes, refusal = [], None
for i in range(conversations):
    status, body = call("POST", "/v1/conversations", key_b, {})
    if status != 200:
        conv_codes.append(status)
        refusal = refusal or body
        continue
    status, body = respond(key_b, f"Chapter {i}", conversation=body["id"])
    conv_codes.append(status)
    if status == 429 and refusal is None:
        refusal = body
conv_end = time.monotonic()

# A's records are all still usable.
must("A: GET its first response", *call("GET", f"/v1/responses/{a1}", key_a))
must("A: continue its response", *respond(key_a, " at last", previous_response_id=a2))
must("A: read its conversation", *call("GET", f"/v1/conversations/{conv_a}", key_a))
items = must("A: its items", *call("GET", f"/v1/conversations/{conv_a}/items", key_a))
if len(items.get("data", [])) < 2:
    sys.exit(f"{label}: A's conversation lost items: {items}")
must("A: post into its conversation", *respond(key_a, "Again", conversation=conv_a))
# B's records of A's ids: as if they never existed.
status, _ = call("GET", f"/v1/responses/{a1}", key_b)
if status != 404:
    sys.exit(f"{label}: B reads A's response: HTTP {status}")

count = lambda codes, c: sum(1 for x in codes if x == c)
if any(c not in (200, 429) for c in chat_codes + conv_codes):
    sys.exit(f"{label}: unexpected statuses: chats {sorted(set(chat_codes))}, "
             f"conversations {sorted(set(conv_codes))}")
if count(conv_codes, 429) == 0:
    sys.exit(f"{label}: B never met its quota in {conversations} conversations")
message = (refusal or {}).get("error", {}).get("message", "")
if "quota" not in message:
    sys.exit(f"{label}: the 429 does not name the quota: {refusal}")
print(f"{label}: B chats {count(chat_codes, 200)}x200 {count(chat_codes, 429)}x429 "
      f"({generated} tokens generated) in "
      f"{chat_end - start:.1f} s; B conversation responses {count(conv_codes, 200)}x200 "
      f"{count(conv_codes, 429)}x429 in {conv_end - chat_end:.1f} s; A intact; "
      f"total {time.monotonic() - start:.1f} s; 429 says: {message}")
