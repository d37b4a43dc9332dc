"""Rows a batch (TRL) reward cannot score: ``None`` for TRL to mask, one warning per cause, or raise.

TRL's ``GRPOTrainer`` turns a ``None`` reward into NaN and leaves it out of
that reward's mean and of the group baseline, so a bad dataset row (missing
image, malformed ground truth) or a timeout does not stop training and is not
trained on as a zero. The policy is ``on_error``:

- ``"mask"`` (default): the row's reward is ``None``; the first row with each
  cause is logged with ``logging.warning``, and every call reports the share
  of masked rows through TRL's ``log_metric`` as ``rewards/<name>/masked_ratio``.
- ``"raise"``: the first such row raises (``ValueError`` for a dataset error,
  ``TimeoutError`` for a timeout), naming the sample index and the cause.

The policy comes from the reward's ``on_error`` argument, else from the
environment variable ``SKYRL_REWARDS_ON_ERROR``, else ``"mask"``.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

from skyrl_rewards.rewards.contract.result import MASKING_STATUSES, ComponentScore, Status

ON_ERROR_ENV = "SKYRL_REWARDS_ON_ERROR"
"""Environment variable that sets the default policy (``mask`` or ``raise``)."""

ON_ERROR_CHOICES = ("mask", "raise")

_logger = logging.getLogger(__name__)


def check_on_error(on_error: str | None) -> str | None:
    """``on_error`` when it is ``None``, ``"mask"`` or ``"raise"``; ``ValueError`` otherwise."""
    if on_error is not None and on_error not in ON_ERROR_CHOICES:
        raise ValueError(f"on_error: expected 'mask' or 'raise', got {on_error!r}")
    return on_error


def on_error_policy(on_error: str | None = None) -> str:
    """The policy in force: ``on_error`` if given, else ``$SKYRL_REWARDS_ON_ERROR``, else ``"mask"``.

    >>> on_error_policy("raise")
    'raise'
    """
    if on_error is not None:
        return check_on_error(on_error) or "mask"
    value = os.environ.get(ON_ERROR_ENV, "").strip().lower() or "mask"
    if value not in ON_ERROR_CHOICES:
        raise ValueError(f"{ON_ERROR_ENV}: expected 'mask' or 'raise', got {value!r}")
    return value


class MaskedRows:
    """Turns one reward's per-row scores into TRL values, warning once per cause.

    One instance per reward function; thread-safe. A *cause* is the reward's
    status and the field its error names (the text before the first ``:``),
    so 1,000 rows with missing images give one warning, not 1,000.
    """

    def __init__(self, reward_name: str) -> None:
        self.reward_name = reward_name
        self._warned: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def values(
        self,
        scores: Sequence[ComponentScore],
        *,
        on_error: str | None = None,
        log_metric: Any = None,
    ) -> list[float | None]:
        """One value per score: the value, or ``None`` for a timeout or error (see module doc).

        ``log_metric`` is TRL's ``log_metric(name, value)`` callable, or anything
        else (ignored).
        """
        policy = on_error_policy(on_error)
        values: list[float | None] = []
        for index, score in enumerate(scores):
            if score.status not in MASKING_STATUSES:
                values.append(float(score.value))
                continue
            if policy == "raise":
                error = TimeoutError if score.status is Status.TIMEOUT else ValueError
                raise error(
                    f"{self.reward_name}: sample {index}: {score.error or score.status.value}"
                )
            self._warn_once(index, score)
            values.append(None)
        if callable(log_metric) and scores:
            masked = sum(value is None for value in values)
            log_metric(f"rewards/{self.reward_name}/masked_ratio", masked / len(scores))
        return values

    def _warn_once(self, index: int, score: ComponentScore) -> None:
        field = score.error.split(":", 1)[0].strip()[:80] if score.error else ""
        cause = (score.status.value, field)
        with self._lock:
            if cause in self._warned:
                return
            self._warned.add(cause)
        _logger.warning(
            "%s: sample %d cannot be scored (%s): %s. Its reward is None, so TRL leaves it out "
            "of the mean and the baseline; further rows with this cause (%s) are masked without "
            "a warning and counted in the metric rewards/%s/masked_ratio. Fix the row, or pass "
            "on_error='raise' (or set %s=raise) to stop at the first one.",
            self.reward_name,
            index,
            score.status.value,
            score.error or "no detail",
            field or score.status.value,
            self.reward_name,
            ON_ERROR_ENV,
        )
