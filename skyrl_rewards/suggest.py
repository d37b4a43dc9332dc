"""The nearest known name to a misspelt one, for error messages (``num_worker`` -> ``num_workers``)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """`` (did you mean 'X'?)`` for the closest of ``known`` to ``name``; ``""`` when none is close.

    >>> did_you_mean("num_worker", ["num_workers", "timeout_s"])
    " (did you mean 'num_workers'?)"
    >>> did_you_mean("zzz", ["num_workers"])
    ''
    """
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
