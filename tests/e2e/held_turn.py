#!/usr/bin/env python3
"""A turn whose reader the test holds: client/python/attnserve_client.py's own `generate`
(retries, the continuation of a turn a shutdown stopped, stdout, finish line, exit
status), except that every Generate call it starts before the file RELEASE exists reads
its first message and then nothing more until that file appears. Its channel keeps
HTTP/2 flow control at a small window (no BDP probing, 1 KiB of lookahead), so the
server's writes stop completing after about 120 token messages (about 8,000 through
HAProxy, whose buffers and HTTP/2 window hold the rest) and the turn pauses with its sink
full (counted by attnserve_waiting_turns) instead of running on: it stays in flight
across a drain, a SIGKILL or a store restart however fast the engine is, and ends only
when the event ends it or the test releases it (a turn with more --max_tokens than the
buffers hold).

For each held call one line goes to stderr when the call ends, before the finish line:
  [held call: held_tokens=N end=REASON]
N token messages were read in all; REASON is the final message's reason (shutdown,
length, ...) or "error" when the call ended without one.
Usage: held_turn.py RELEASE [attnserve_client.py flags] generate [generate flags]
Needs the stubs on PYTHONPATH, as attnserve_client.py does.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "client", "python"))
import attnserve_client as client  # noqa: E402

release = sys.argv.pop(1)
# open_channel passes these options to every channel it makes.
client.RECONNECT = client.RECONNECT + (("grpc.http2.bdp_probe", 0),
                                       ("grpc.http2.lookahead_bytes", 1024))
AttnServeStub = client.pb_grpc.AttnServeStub


def held(call):
    """Yields call's messages: the first, then none until RELEASE exists (the test
    creates it). A token read, the client never sends the turn again (its retry rule):
    a server that goes away meanwhile fails the turn."""
    tokens, end, first = 0, "error", True
    try:
        for message in call:
            if message.HasField("final"):
                end = client.pb.FinishReason.Name(message.final.reason)
                end = end.removeprefix("FINISH_REASON_").lower()
            else:
                tokens += 1
            yield message
            while first and not os.path.exists(release):
                time.sleep(0.01)
            first = False
    finally:
        sys.stderr.write(f"[held call: held_tokens={tokens} end={end}]\n")
        sys.stderr.flush()


class HeldStub:
    def __init__(self, channel):
        self._stub = AttnServeStub(channel)

    def __getattr__(self, name):
        return getattr(self._stub, name)

    def Generate(self, request, **kwargs):
        call = self._stub.Generate(request, **kwargs)  # sent now; read when released
        return call if os.path.exists(release) else held(call)


client.pb_grpc.AttnServeStub = HeldStub
sys.exit(client.main())
