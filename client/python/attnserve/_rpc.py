"""Errors and retries of every call the client makes."""
import random
import time

import grpc

# A refused call is sent again as the C++ client does (client/retry.h): at most this many
# attempts, waiting FIRST_WAIT, then twice as long each time (+-JITTER), none starting
# later than BUDGET seconds after the first or past the call's deadline.
RETRY_ATTEMPTS, RETRY_FIRST_WAIT, RETRY_JITTER, RETRY_BUDGET = 8, 0.05, 0.2, 10.0
# A replica draining or the session busy on another one (UNAVAILABLE); a stopping server
# cancels the calls that reach it (CANCELLED).
RETRIED = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)


class Error(Exception):
    """A call that ended with an error status: `code` is its grpc.StatusCode, `details`
    the server's message (which names the field or the limit). str(error) is
    "CODE: details", as the command line prints it after "attnserve: "."""

    def __init__(self, code, details):
        super().__init__(code, details)
        self.code = code
        self.details = details

    def __str__(self):
        return f"{self.code.name}: {self.details}"

    @classmethod
    def from_rpc(cls, error):
        """The Error of a grpc.RpcError raised by a call."""
        code = error.code() if callable(getattr(error, "code", None)) else None
        details = error.details() if callable(getattr(error, "details", None)) else None
        return cls(code or grpc.StatusCode.UNKNOWN, details or str(error))


def routed(session_id):
    """Metadata of a call that names a session: x-session-id, the header a load balancer
    in front of several replicas routes by."""
    return (("x-session-id", session_id),) if session_id else ()


class Backoff:
    """The attempts of one call: `left()` is the timeout of the next attempt (None: no
    deadline), `again(error, resend_ok)` says after a failed attempt whether to send the
    call again, after sleeping the wait, or to give up."""

    def __init__(self, timeout, enabled=True):
        self.start = time.monotonic()
        self.deadline = None if timeout is None else self.start + timeout
        self.attempts = 0
        self.enabled = enabled

    def left(self):
        return None if self.deadline is None else self.deadline - time.monotonic()

    def again(self, error, resend_ok=True):
        self.attempts += 1
        wait = (RETRY_FIRST_WAIT * 2 ** (self.attempts - 1)
                * random.uniform(1 - RETRY_JITTER, 1 + RETRY_JITTER))
        resume = time.monotonic() + wait
        if (not self.enabled or not resend_ok or error.code() not in RETRIED
                or self.attempts >= RETRY_ATTEMPTS or resume > self.start + RETRY_BUDGET
                or (self.deadline is not None and resume >= self.deadline)):
            return False
        time.sleep(wait)
        return True


def call(attempt, timeout, retry=True, resend_ok=lambda: True):
    """Returns attempt(seconds left of `timeout`), calling it again after an UNAVAILABLE
    or CANCELLED error while retry is on, resend_ok() says the same request may be sent
    again and the Backoff bounds allow. Raises Error with the last status."""
    backoff = Backoff(timeout, retry)
    while True:
        try:
            return attempt(backoff.left())
        except grpc.RpcError as error:
            if not backoff.again(error, resend_ok()):
                raise Error.from_rpc(error) from None
