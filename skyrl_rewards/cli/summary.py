"""Per-component statistics of a scored file: the summary table, the histograms, the masked rows.

Only judgements enter the statistics. A component whose status is
``timeout`` or ``error`` holds a fallback value, not a judgement (see
:mod:`skyrl_rewards.rewards.contract.result`): it is left out of that component's
mean, spread, floor share and histogram, and counted instead. For ``total``,
a row is left out when it should be masked (any component timed out or
errored); ``unparseable`` values are judgements (the model wrote nothing
readable) and are included.

For every component (and the weighted ``total``): the number of scored
values, their mean, standard deviation (population) and share *at floor*,
and the counts of ``unparseable``, ``error`` and ``timeout`` outcomes (for
``total``: rows with an unparseable, an errored or a timed-out component).

*At floor* has one definition, used by the table and the histograms alike:
a value within :data:`FLOOR_TOLERANCE` of the component's floor, the lowest
value it pays (0.0 for most rewards, -1.0 for ``repetition``, -0.5 for
``length`` with its default schedule; for ``total`` the weighted sum of the
floors). The histograms draw those values as their own bar at the floor,
apart from the others: a ``length`` of -0.498 is not at floor, and is drawn
in the first ordinary bar, not in the floor bar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from skyrl_rewards.rewards.contract.result import MASKING_VALUES, RewardResult, Status

TOTAL = "total"
FLOORS: Mapping[str, float] = {"repetition": -1.0, "length": -0.5}
"""Lowest value of a component when it is not 0.0 (SPEC.md ranges)."""

FLOOR_TOLERANCE = 1e-3
"""A value this close to the floor is *at floor* (table and histograms alike)."""

HISTOGRAM_BINS = 20
"""Ordinary bars of a histogram, besides the floor bar."""


@dataclass(frozen=True)
class ComponentStats:
    """Statistics of one component over a scored file (masked values left out)."""

    name: str
    scored: int
    """Values that entered the statistics (judgements, not fallbacks)."""
    mean: float
    std: float
    at_floor: float
    """Share of the scored values at the floor (see :func:`is_at_floor`); NaN when none."""
    unparseable: int
    errors: int
    timeouts: int
    floor: float = 0.0


def is_at_floor(value: float, floor: float) -> bool:
    """The one rule for *at floor*: within :data:`FLOOR_TOLERANCE` of ``floor``.

    >>> is_at_floor(-0.4995, -0.5), is_at_floor(-0.498, -0.5)
    (True, False)
    """
    return abs(value - floor) <= FLOOR_TOLERANCE


def split_at_floor(values: Sequence[float], floor: float) -> tuple[list[float], list[float]]:
    """``(at_floor, rest)``: the table's floor share and the histogram's floor bar both come from here.

    >>> split_at_floor([-0.5, -0.498, 0.2], -0.5)
    ([-0.5], [-0.498, 0.2])
    """
    at_floor = [v for v in values if is_at_floor(v, floor)]
    rest = [v for v in values if not is_at_floor(v, floor)]
    return at_floor, rest


def component_floors(
    results: Sequence[RewardResult], weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """Floor of each component (config order of the first result) and of ``total``.

    ``weights`` (the mix's, name -> weight) place the floor of ``total``;
    without them it is 0.0.
    """
    names = list(results[0].components) if results else []
    floors = {name: FLOORS.get(name, 0.0) for name in names}
    floors[TOTAL] = sum(w * FLOORS.get(n, 0.0) for n, w in (weights or {}).items())
    return floors


def scored_values(results: Sequence[RewardResult]) -> dict[str, list[float]]:
    """Per component, then ``total``: the values that are judgements (fallbacks left out)."""
    names = list(results[0].components) if results else []
    values = {
        name: [
            r.components[name]
            for r in results
            if name in r.components and r.status.get(name, "") not in MASKING_VALUES
        ]
        for name in names
    }
    values[TOTAL] = [r.total for r in results if not r.should_mask]
    return values


def _stats(
    name: str, values: Sequence[float], statuses: Sequence[set[str]], floor: float
) -> ComponentStats:
    count = len(values)
    mean = sum(values) / count if count else math.nan
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / count) if count else math.nan
    floor_share = len(split_at_floor(values, floor)[0]) / count if count else math.nan
    return ComponentStats(
        name=name,
        scored=count,
        mean=mean,
        std=std,
        at_floor=floor_share,
        unparseable=sum(Status.UNPARSEABLE.value in s for s in statuses),
        errors=sum(Status.ERROR.value in s for s in statuses),
        timeouts=sum(Status.TIMEOUT.value in s for s in statuses),
        floor=floor,
    )


def summarize(
    results: Sequence[RewardResult], weights: Mapping[str, float] | None = None
) -> list[ComponentStats]:
    """One :class:`ComponentStats` per component, then one for ``total``.

    ``weights`` (the mix's, name -> weight) place the floor of ``total``.

    >>> from skyrl_rewards.rewards.contract.result import ComponentScore
    >>> ok = RewardResult.from_components({"format": ComponentScore(1.0)}, {"format": 1.0})
    >>> bad = RewardResult.from_components(
    ...     {"format": ComponentScore(0.0, Status.ERROR, "x")}, {"format": 1.0})
    >>> [(s.name, s.scored, s.mean, s.errors) for s in summarize([ok, bad])]
    [('format', 1, 1.0, 1), ('total', 1, 1.0, 1)]
    """
    floors = component_floors(results, weights)
    stats = []
    for name, values in scored_values(results).items():
        if name == TOTAL:
            statuses = [set(r.status.values()) for r in results]
        else:
            statuses = [{r.status.get(name, "")} for r in results]
        stats.append(_stats(name, values, statuses, floors[name]))
    return stats


def _number(value: float, spec: str) -> str:
    """``value`` formatted, ``-`` for NaN, never a negative zero (``-0.000``)."""
    if math.isnan(value):
        return "-"
    if spec.endswith("%"):  # half up, as a reader rounds (5/8: 63%), not Python's half to even
        places = int(spec.strip(".%") or 0)
        value = math.floor(value * 10 ** (places + 2) + 0.5) / 10 ** (places + 2)
    text = format(value, spec)
    return text[1:] if text.startswith("-") and float(text.rstrip("%")) == 0.0 else text


def format_table(stats: Sequence[ComponentStats]) -> str:
    """A plain-text table, one line per component (see the module docstring for the columns)."""
    header = ("component", "scored", "mean", "std", "at floor", "unparseable", "errors", "timeouts")
    lines = [header]
    for s in stats:
        lines.append(
            (
                s.name,
                str(s.scored),
                _number(s.mean, ".3f"),
                _number(s.std, ".3f"),
                _number(s.at_floor, ".0%"),
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


def clamped_lines(results: Sequence[RewardResult]) -> list[str]:
    """The clamped-boxes line: per component, the boxes clamped to their grid and in how many rows.

    A box past its grid (a Qwen3-VL coordinate past 1000) is scored as the
    box clamped to it; this line shows how often the policy wrote one
    (``RewardResult.clamped``). No line when no box was clamped.

    >>> clamped_lines([RewardResult(1.0, clamped={"iou": 2}), RewardResult(0.0)])
    ['clamped boxes (past the 0-1000 or 0-1 grid, scored at its edge): iou 2 in 1 of 2 rows']
    """
    boxes: dict[str, int] = {}
    rows: dict[str, int] = {}
    for result in results:
        for name, count in result.clamped.items():
            boxes[name] = boxes.get(name, 0) + count
            rows[name] = rows.get(name, 0) + 1
    if not boxes:
        return []
    counts = ", ".join(
        f"{name} {n} in {rows[name]} of {len(results)} rows" for name, n in boxes.items()
    )
    return [f"clamped boxes (past the 0-1000 or 0-1 grid, scored at its edge): {counts}"]


MASKED_ERROR_CHARS = 160
"""A masked row's message is cut here in the listing (the whole message is in the output file)."""


def _cut(text: str) -> str:
    return text if len(text) <= MASKED_ERROR_CHARS else text[: MASKED_ERROR_CHARS - 3] + "..."


def masked_rows(
    rows: Sequence[Mapping[str, Any]], lines: Sequence[int], results: Sequence[RewardResult]
) -> list[str]:
    """One line per masked row: ``line 3 (id x): iou: error: image not found: ...``.

    Each message is cut at :data:`MASKED_ERROR_CHARS` characters.
    """
    out = []
    for row, line, result in zip(rows, lines, results, strict=True):
        if not result.should_mask:
            continue
        label = f"line {line} (id {row['id']})" if "id" in row else f"line {line}"
        why = "; ".join(
            f"{name}: {status}: {_cut(result.errors.get(name, ''))}".rstrip(": ")
            for name, status in result.status.items()
            if status in MASKING_VALUES
        )
        out.append(f"{label}: {why}")
    return out


def draw_histogram(ax: Any, name: str, values: Sequence[float], floor: float, masked: int) -> None:
    """Draw one component's scored ``values`` on the matplotlib axes ``ax``.

    The values at the floor (:func:`split_at_floor`, as in the table) are one
    bar of their own, labelled ``at floor``, in another colour, ending at the
    floor; the rest are spread over :data:`HISTOGRAM_BINS` bars from the floor
    (or their lowest value) to their highest. The title gives how many values
    were scored and how many were masked.
    """
    at_floor, rest = split_at_floor(values, floor)
    rest = [v for v in rest if math.isfinite(v)]
    low, high = min([floor, *rest]), max([floor, *rest])
    width = (high - low) / HISTOGRAM_BINS if high > low else 0.05
    if rest:
        ax.hist(
            rest,
            bins=HISTOGRAM_BINS,
            range=(low, high) if high > low else None,
            color="tab:blue",
            label="scored",
        )
    if at_floor:  # the bar ends at the floor: it never covers a value above it
        ax.bar(
            [floor],
            [len(at_floor)],
            width=-width,
            align="edge",
            color="tab:orange",
            label=f"at floor ({floor:g})",
        )
    if not values:
        ax.text(0.5, 0.5, "no scored values", ha="center", va="center", transform=ax.transAxes)
    if rest and at_floor:
        ax.legend(fontsize="small")
    ax.set_xlim(low - 1.5 * width, high + width)
    ax.set_title(f"{name} (n={len(values)}, masked {masked})")
    ax.set_xlabel("reward")
    ax.set_ylabel("samples")


def write_histograms(
    results: Sequence[RewardResult], output: Path, weights: Mapping[str, float] | None = None
) -> list[Path]:
    """One PNG per component (and ``total``) next to ``output``: ``<stem>.<component>.png``.

    Each plot holds the scored values only (see :func:`draw_histogram`). Drawn
    on matplotlib's ``Figure`` with the Agg canvas, without ``pyplot`` (no GUI
    backend, no global figures) and with fixed margins instead of
    ``tight_layout``: the pyplot import and the layout pass took most of a
    small ``score``'s time.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    floors = component_floors(results, weights)
    paths = []
    for name, values in scored_values(results).items():
        fig = Figure(figsize=(4, 3), dpi=100)
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        draw_histogram(ax, name, values, floors[name], len(results) - len(values))
        fig.subplots_adjust(left=0.16, right=0.96, bottom=0.16, top=0.9)
        path = output.with_name(f"{output.stem}.{name}.png")
        fig.savefig(path)
        paths.append(path)
    return paths


def judge_lines(judges: Mapping[str, Any]) -> list[str]:
    """One line per judge endpoint of a pool's ``metrics()["judge"]``: calls, tokens, errors, cost.

    >>> judge_lines({"m@http://h/v1": {"requests": 2, "calls": 1, "ok": 1, "retries": 0,
    ...     "errors": {"timeout": 1}, "tokens_in": 10, "tokens_out": 2, "cache_hits": 1,
    ...     "latency_s": {"p50": 0.25, "p99": 0.5}, "breaker": {"state": "closed", "opens": 0}}})
    ['judge m@http://h/v1: requests 2, calls 1, ok 1, retries 0, cache hits 1, errors timeout 1; tokens in 10 out 2; latency p50 0.250s p99 0.500s; breaker closed (opened 0 times)']
    """
    if "error" in judges:
        return [f"judge: {judges['error']}"]
    lines = []
    for label, m in judges.items():
        errors = ", ".join(f"{kind} {n}" for kind, n in sorted(m.get("errors", {}).items()))
        latency = m.get("latency_s", {})
        breaker = m.get("breaker", {})
        cost = f"; cost {m['cost']:.4f}" if m.get("cost") is not None else ""
        timing = (
            f"latency p50 {latency.get('p50') or 0.0:.3f}s p99 {latency.get('p99') or 0.0:.3f}s"
            if m.get("ok", 0)
            else "latency n/a (no reply)"
        )
        lines.append(
            f"judge {label}: requests {m.get('requests', 0)}, calls {m.get('calls', 0)}, "
            f"ok {m.get('ok', 0)}, retries {m.get('retries', 0)}, cache hits "
            f"{m.get('cache_hits', 0)}, errors {errors or 'none'}; tokens in "
            f"{m.get('tokens_in', 0)} out {m.get('tokens_out', 0)}; {timing}; breaker "
            f"{breaker.get('state', '?')} (opened {breaker.get('opens', 0)} times){cost}"
        )
    return lines


def unreachable_lines(judges: Mapping[str, Any]) -> list[str]:
    """One line per judge endpoint that could not be reached: how many requests it cost, why, what to check.

    An endpoint was unreachable when requests to it ended ``connect``, or its
    breaker was opened by a failure to connect; the line names the failure
    (the breaker's ``cause``) once, for ``score`` to print above its table.

    >>> unreachable_lines({"m@http://h/v1": {"requests": 4, "errors": {"connect": 1,
    ...     "breaker_open": 3}, "breaker": {"cause": "cannot reach http://h/v1/chat/completions:"
    ...     " ConnectError: refused"}}})[0].split(". Check")[0]
    'judge endpoint http://h/v1 (model m) was unreachable: 4 of 4 requests failed (breaker_open 3, connect 1); the failure: cannot reach http://h/v1/chat/completions: ConnectError: refused'
    """
    if "error" in judges:
        return []
    lines = []
    for label, m in judges.items():
        errors = m.get("errors", {})
        cause = m.get("breaker", {}).get("cause", "")
        if not errors.get("connect") and "cannot reach" not in cause:
            continue
        model, _, url = label.partition("@")
        failed = ", ".join(f"{kind} {n}" for kind, n in sorted(errors.items()))
        why = f"; the failure: {cause}" if cause else ""
        lines.append(
            f"judge endpoint {url} (model {model}) was unreachable: {sum(errors.values())} of "
            f"{m.get('requests', 0)} requests failed ({failed}){why}. Check that the judge server "
            f"is running and listening at that address (curl {url}/models) and that the config's "
            "endpoint.base_url is its address"
        )
    return lines
