"""Per-component statistics of a scored file: the summary table and the histograms.

For every component (and the weighted ``total``) over all scored samples:
mean, standard deviation (population), the fraction of samples at the
component's floor (within 0.001 of the lowest value it pays: 0.0 for most
rewards, -1.0 for ``repetition``, -0.5 for ``length`` with its default
schedule; for ``total`` the weighted sum of the floors), and the counts of
``unparseable``, ``error`` and ``timeout`` outcomes (see
:mod:`skyrl_rewards.rewards.result`). For ``total``, ``errors`` counts the samples to
mask (a component timed out or errored).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from skyrl_rewards.rewards.result import RewardResult, Status

TOTAL = "total"
FLOORS: Mapping[str, float] = {"repetition": -1.0, "length": -0.5}
"""Lowest value of a component when it is not 0.0 (SPEC.md ranges)."""


@dataclass(frozen=True)
class ComponentStats:
    """Statistics of one component over a scored file."""

    name: str
    count: int
    mean: float
    std: float
    at_floor: float
    """Fraction of samples whose value is the component's floor."""
    unparseable: int
    errors: int
    timeouts: int


FLOOR_TOLERANCE = 1e-3


def _stats(
    name: str, values: Sequence[float], statuses: Sequence[str], floor: float
) -> ComponentStats:
    count = len(values)
    mean = sum(values) / count if count else math.nan
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / count) if count else math.nan
    return ComponentStats(
        name=name,
        count=count,
        mean=mean,
        std=std,
        at_floor=sum(1 for v in values if abs(v - floor) <= FLOOR_TOLERANCE) / count
        if count
        else math.nan,
        unparseable=statuses.count(Status.UNPARSEABLE.value),
        errors=statuses.count(Status.ERROR.value),
        timeouts=statuses.count(Status.TIMEOUT.value),
    )


def component_values(results: Sequence[RewardResult]) -> dict[str, list[float]]:
    """Values per component (config order of the first result), then ``total``."""
    names = list(results[0].components) if results else []
    values = {name: [r.components.get(name, math.nan) for r in results] for name in names}
    values[TOTAL] = [r.total for r in results]
    return values


def summarize(
    results: Sequence[RewardResult], weights: Mapping[str, float] | None = None
) -> list[ComponentStats]:
    """One :class:`ComponentStats` per component, then one for ``total``.

    ``weights`` (the mix's, name -> weight) place the floor of ``total``;
    without them it is 0.0.

    >>> from skyrl_rewards.rewards.result import ComponentScore
    >>> r = RewardResult.from_components({"format": ComponentScore(1.0)}, {"format": 1.0})
    >>> [(s.name, s.mean) for s in summarize([r])]
    [('format', 1.0), ('total', 1.0)]
    """
    stats = []
    for name, values in component_values(results).items():
        if name == TOTAL:
            floor = sum(w * FLOORS.get(n, 0.0) for n, w in (weights or {}).items())
            statuses = [Status.ERROR.value if r.should_mask else Status.OK.value for r in results]
            stats.append(_stats(name, values, statuses, floor))
        else:
            statuses = [r.status.get(name, "") for r in results]
            stats.append(_stats(name, values, statuses, FLOORS.get(name, 0.0)))
    return stats


def format_table(stats: Sequence[ComponentStats]) -> str:
    """A plain-text table, one line per component; ``total``'s errors count masked samples."""
    header = ("component", "mean", "std", "at floor", "unparseable", "errors", "timeouts")
    lines = [header]
    for s in stats:
        lines.append(
            (
                s.name,
                f"{s.mean:.3f}",
                f"{s.std:.3f}",
                f"{s.at_floor:.0%}",
                str(s.unparseable),
                str(s.errors),
                str(s.timeouts),
            )
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    rendered = [
        "  ".join(
            cell.ljust(w) if i == 0 else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(line, widths, strict=True))
        )
        for line in lines
    ]
    rendered.insert(1, "-" * len(rendered[0]))
    return "\n".join(rendered)


def write_histograms(results: Sequence[RewardResult], output: Path) -> list[Path]:
    """One PNG per component (and ``total``) next to ``output``: ``<stem>.<component>.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for name, values in component_values(results).items():
        finite = [v for v in values if math.isfinite(v)]
        fig, ax = plt.subplots(figsize=(4, 3), dpi=100)
        ax.hist(finite, bins=20)
        ax.set_title(f"{name} (n={len(finite)})")
        ax.set_xlabel("reward")
        ax.set_ylabel("samples")
        fig.tight_layout()
        path = output.with_name(f"{output.stem}.{name}.png")
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths
