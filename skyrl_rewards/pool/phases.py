"""A pool's start-up phases, each reported when it begins and when it ends, with its time.

Starting a pool waits on things a user cannot see: Ray's processes coming
up, each worker importing its rewards. :func:`phase` logs what is waited
for (logger ``skyrl_rewards.pool.phases``, level INFO) when the wait begins
and how long it took when it ends; :func:`current_phase` names the wait under
way, for a Ctrl-C handler to say what it is waiting for. The command line
prints these records; a library user sees them with ``logging`` at INFO.

Phases are entered from the thread that starts the pool; this module
imports no Ray.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

logger = logging.getLogger(__name__)

_under_way: list[str] = []


@contextmanager
def phase(waiting_for: str) -> Iterator[None]:
    """Log ``waiting_for ...`` now and ``waiting_for: done in 3.2 s`` when the block ends without error.

    >>> with phase("loading the rewards"):
    ...     current_phase()
    'loading the rewards'
    >>> current_phase() is None
    True
    """
    logger.info("%s ...", waiting_for)
    _under_way.append(waiting_for)
    start = time.monotonic()
    try:
        yield
    finally:
        _under_way.pop()
    logger.info("%s: done in %.1f s", waiting_for, time.monotonic() - start)


def current_phase() -> str | None:
    """The innermost phase under way, or ``None`` outside every phase."""
    return _under_way[-1] if _under_way else None
