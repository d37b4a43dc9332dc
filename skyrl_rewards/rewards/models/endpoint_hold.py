"""An endpoint-wide ``Retry-After``: one 429 (or 503) holds every call to that server until it passes.

A server that answers 429 with ``Retry-After: N`` says "no calls for N
seconds", not "retry this one request in N seconds". Honoured per request, a
storm of 429s multiplies the calls: every request still queued goes out, gets
its own 429 and waits its own ``Retry-After``. A :class:`Hold` is that
endpoint's pause: a throttled call :meth:`extends <Hold.extend>` it, and every
call to the endpoint :meth:`waits <Hold.wait>` for it before it is sent.

There is one hold per server root (:func:`server_root`: the base URL without a
trailing ``/v1``) per process, shared by every client of that server in the
process: a judge and a served reward model of one vLLM, the pool's judge lane
(one process for the whole pool, so every client process of the pool is held),
the tau-bench eval's threads. A hold is plain time (``time.monotonic``), so
clients on different event loops share it safely.
"""

from __future__ import annotations

import asyncio
import threading
import time


def server_root(base_url: str) -> str:
    """``base_url`` without its trailing slash and a trailing ``/v1`` (once): where vLLM mounts
    ``/classify``, ``/pooling``, ``/generative_scoring`` and ``/tokenize``.

    >>> server_root("http://127.0.0.1:8000/v1/"), server_root("http://h:8000")
    ('http://127.0.0.1:8000', 'http://h:8000')
    """
    return base_url.rstrip("/").removesuffix("/v1")


class Hold:
    """A pause of one endpoint: no call goes out before :attr:`until` (monotonic seconds).

    >>> hold = Hold()
    >>> hold.extend(0.05); hold.remaining() > 0
    True
    >>> asyncio.run(hold.wait(1.0)), hold.remaining()
    (True, 0.0)
    """

    def __init__(self) -> None:
        self.until = 0.0
        self.pauses = 0
        """How many times a throttled call set or lengthened the pause."""
        self.held = 0
        """Calls that waited for a pause before they were sent."""

    def extend(self, seconds: float) -> None:
        """No call before ``seconds`` from now (a pause already longer is kept)."""
        until = time.monotonic() + max(0.0, seconds)
        if until > self.until:
            self.until = until
            self.pauses += 1

    def remaining(self) -> float:
        """Seconds until calls may go out again (0.0: now)."""
        return max(0.0, self.until - time.monotonic())

    async def wait(self, timeout_s: float) -> bool:
        """Wait until the pause has passed: ``True``; ``False`` at once when it ends past ``timeout_s``.

        A pause lengthened while waiting is waited for too (within the same bound).
        """
        deadline = time.monotonic() + timeout_s
        waited = False
        while True:
            now = time.monotonic()
            if self.until <= now:
                return True
            if self.until > deadline:
                return False
            if not waited:
                self.held += 1
                waited = True
            await asyncio.sleep(self.until - now)


_LOCK = threading.Lock()
_HOLDS: dict[str, Hold] = {}


def endpoint_hold(base_url: str) -> Hold:
    """This process's :class:`Hold` of the server at ``base_url`` (one per :func:`server_root`)."""
    root = server_root(base_url)
    with _LOCK:
        hold = _HOLDS.get(root)
        if hold is None:
            hold = _HOLDS[root] = Hold()
        return hold
