"""What scoring one sample produces: a value per component, its outcome, and the total.

A component's outcome is one of four statuses:

- ``ok``: the reward was computed normally (including a legitimate 0.0).
- ``unparseable``: the model's answer could not be read (no box, broken JSON,
  no answer at all); the value is the reward's documented floor.
- ``timeout``: scoring ran past its time limit; the value is the fallback.
- ``error``: the dataset or our code was wrong (malformed ground truth, missing
  image); the value is the fallback and ``errors`` says why.

A trainer should *mask* a sample with a ``timeout`` or ``error`` component
rather than treat its fallback value as a real judgement of the policy.

A component may also note, beside its value, how many of the answer's boxes
it clamped to their relative grid (``clamped``: a Qwen3-VL box past 1000 is
scored as its edge, see :mod:`~skyrl_rewards.rewards.geometry.box_formats`);
the value is the clamped box's, and the count shows how often it happens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """Outcome of one reward component on one sample."""

    OK = "ok"
    UNPARSEABLE = "unparseable"
    TIMEOUT = "timeout"
    ERROR = "error"


MASKING_STATUSES = frozenset({Status.TIMEOUT, Status.ERROR})
MASKING_VALUES = frozenset(status.value for status in MASKING_STATUSES)
"""The plain-string statuses (as stored in :attr:`RewardResult.status`) that call for masking."""


@dataclass(frozen=True)
class ComponentScore:
    """One reward component's value on one sample, with its outcome.

    ``clamped``: how many predicted boxes (a point counts as one) had a
    coordinate past their relative grid (0-1000 or 0-1) and were scored
    clamped to it; 0 for every reward that converts no relative box.
    """

    value: float
    status: Status = Status.OK
    error: str = ""
    clamped: int = 0


@dataclass
class RewardResult:
    """The scored form of one sample.

    ``total`` is the weighted sum of ``components``; ``status`` maps each
    component to a :class:`Status` value (as a plain string), ``errors`` holds a
    message for every component whose status is ``timeout`` or ``error``, and
    ``clamped`` the count of clamped boxes (:attr:`ComponentScore.clamped`) for
    every component that clamped one.
    """

    total: float
    components: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    status: dict[str, str] = field(default_factory=dict)
    latency_s: float = 0.0
    clamped: dict[str, int] = field(default_factory=dict)

    @property
    def should_mask(self) -> bool:
        """True when a component timed out or errored: mask the sample, do not train on zero."""
        return any(s in MASKING_VALUES for s in self.status.values())

    @property
    def ok(self) -> bool:
        """True when every component has status ``ok``."""
        return all(s == Status.OK.value for s in self.status.values())

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready form (used in env metadata and output files)."""
        return {
            "total": self.total,
            "components": dict(self.components),
            "errors": dict(self.errors),
            "status": dict(self.status),
            "latency_s": self.latency_s,
            "should_mask": self.should_mask,
            "clamped": dict(self.clamped),
        }

    @classmethod
    def from_components(
        cls,
        scores: dict[str, ComponentScore],
        weights: dict[str, float],
        latency_s: float = 0.0,
    ) -> RewardResult:
        """Combine component scores into a result; ``total`` is the weighted sum."""
        total = sum(weights[name] * score.value for name, score in scores.items())
        return cls(
            total=float(total),
            components={name: float(s.value) for name, s in scores.items()},
            errors={name: s.error for name, s in scores.items() if s.error},
            status={name: s.status.value for name, s in scores.items()},
            latency_s=latency_s,
            clamped={name: s.clamped for name, s in scores.items() if s.clamped},
        )
