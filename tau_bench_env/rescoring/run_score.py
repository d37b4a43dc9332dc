"""What one re-scored run gives (:class:`RunScore`), and how its replayed tool results are
compared with the recorded ones (:func:`normalize_tool_result`, :class:`Divergence`: a run
whose replay gave another result was recorded on other data, and its reward is no judgement).
Used by :mod:`~tau_bench_env.rescoring.rescore` (which replays), its figures and reports.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from typing import Any

from tau_bench_env.episode.nvidia_tau2_reward import (
    Tau2RewardResult,
)
from tau_bench_env.episode.reward import RewardResult
from tau_bench_env.rescoring.tau2_results import (
    RecordedResult,
)

SUCCESS_TOLERANCE = 1e-6


EXCERPT_CHARS = 60
"""Characters of each side a :class:`Divergence` shows, around the first difference."""


TIMING_FOOTER = re.compile(r"\s*\[Timing: retrieval=\d+ms(?:, reranking=\d+ms)?, total=\d+ms\]$")
"""The footer tau2's knowledge-base search adds to its results (milliseconds it took)."""


def normalize_tool_result(text: str) -> str:
    """The form in which a recorded and a replayed tool result are compared.

    Canonical JSON when the stripped text parses as JSON (keys sorted, fixed
    spacing, every number a float: ``100`` equals ``100.0``, ``true`` is not
    ``1``), else the stripped text.

    >>> normalize_tool_result(' {"b": 1,  "a": [1.5, null, true]} ')
    '{"a": [1.5, null, true], "b": 1.0}'
    >>> normalize_tool_result("Error: User not found\\n")
    'Error: User not found'

    tau2's knowledge-base search results (banking_knowledge) end with the
    search's wall-clock time, which no replay reproduces: that footer is dropped.

    >>> normalize_tool_result("1. Fees\\n\\n[Timing: retrieval=12ms, total=12ms]")
    '1. Fees'
    """
    stripped = TIMING_FOOTER.sub("", text.strip())
    try:
        parsed = json.loads(stripped, parse_int=float)
        return json.dumps(parsed, sort_keys=True, ensure_ascii=False)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to parse
        return stripped


def _cut(text: str, start: int) -> str:
    end = start + EXCERPT_CHARS
    return ("..." if start else "") + text[start:end] + ("..." if end < len(text) else "")


def _excerpts(recorded: str, replayed: str) -> tuple[str, str]:
    """Both texts cut to :data:`EXCERPT_CHARS` from a little before their first difference."""
    differ = (i for i, (a, b) in enumerate(zip(recorded, replayed, strict=False)) if a != b)
    at = next(differ, min(len(recorded), len(replayed)))
    start = max(0, at - EXCERPT_CHARS // 3)
    return _cut(recorded, start), _cut(replayed, start)


DIVERGENCE_CAUSES = {
    "fields": "other fields (a record field on one side only)",
    "values": "other values (a field on both sides holds other data)",
    "failed": "a call that failed on one side only",
    "text": "other text (results that are not JSON)",
}
"""Why a replayed result differs from the recorded one (:func:`difference_causes`), by key."""
CAUSE_FIELDS = 20
"""Field names a run keeps per cause (the file's own names: kept short and few)."""
FIELD_CHARS = 40
"""Characters of a field name kept."""


def _is_error(text: str) -> bool:
    return text.lstrip().startswith("Error")


def _walk(recorded: Any, replayed: Any, name: str, found: dict[str, set[str]]) -> None:
    """Add to ``found`` each field that only one side has and each field whose value differs."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        for key in recorded.keys() ^ replayed.keys():
            found["fields"].add(key)
        for key in recorded.keys() & replayed.keys():
            _walk(recorded[key], replayed[key], key, found)
    elif (
        isinstance(recorded, list) and isinstance(replayed, list) and len(recorded) == len(replayed)
    ):
        for old, new in zip(recorded, replayed, strict=True):
            _walk(old, new, name, found)
    elif recorded != replayed:
        found["values"].add(name)


def difference_causes(recorded: str, replayed: str) -> dict[str, list[str]]:
    """Why two normalised tool results that differ do so: cause -> the fields it shows in.

    Causes (:data:`DIVERGENCE_CAUSES`): ``fields`` (a field on one side only,
    at any depth), ``values`` (a field on both sides with another value; the
    field's name, or ``(the result)`` for a top-level value), ``failed`` (one
    side an ``Error...`` text, the other not), ``text`` (either side not JSON).

    >>> difference_causes('{"a": 1.0, "b": "EWR"}', '{"a": 1.0, "b": "IAH", "c": null}')
    {'fields': ['c'], 'values': ['b']}
    >>> difference_causes("Error: no such user", '{"id": "u1"}')
    {'failed': []}
    """
    if _is_error(recorded) != _is_error(replayed):
        return {"failed": []}
    try:
        old, new = json.loads(recorded), json.loads(replayed)
        found: dict[str, set[str]] = {"fields": set(), "values": set()}
        _walk(old, new, "(the result)", found)
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk
        return {"text": []}
    return {cause: sorted(names) for cause, names in found.items() if names}


@dataclass(frozen=True)
class Divergence:
    """A tool result that differs on replay from the one the file recorded."""

    message: int
    """Index of the recorded tool message (tau2: in ``messages``; tau-bench: in ``traj``)."""
    tool: str
    requestor: str
    """``assistant`` or ``user`` (tau2's dual control)."""
    recorded: str
    """Excerpt of the recorded result (normalised), around the first difference."""
    replayed: str
    """Excerpt of the replayed result (normalised), around the first difference."""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able fields."""
        return asdict(self)


@dataclass
class ResultCheck:
    """Compares one run's replayed tool results with the recorded ones."""

    compared: int = 0
    diverged: int = 0
    first: Divergence | None = None
    causes: dict[str, list[str]] = field(default_factory=dict)
    """Each cause (:data:`DIVERGENCE_CAUSES`) of the differing results: the fields it shows in
    (at most :data:`CAUSE_FIELDS`, each cut to :data:`FIELD_CHARS` characters)."""

    def check(
        self,
        recorded: RecordedResult | None,
        replayed: str,
        tool: str,
        *,
        requestor: str = "assistant",
        ran: bool = True,
    ) -> None:
        """Count ``replayed`` against ``recorded`` (nothing when the file holds no result).

        A call that failed on both sides agrees, whatever the two error texts say
        (backends word the same exception differently; the agent saw a failure
        either way): recorded with tau2's ``error`` flag or as ``Error...`` text,
        replayed as ``Error...`` text or not run at all (``ran`` False: the domain
        has no such tool).
        """
        if recorded is None:
            return
        self.compared += 1
        recorded_failed = recorded.error or recorded.content.lstrip().startswith("Error")
        if recorded_failed and (not ran or replayed.lstrip().startswith("Error")):
            return
        if recorded.content == replayed:  # the same text normalises the same
            return
        expected, got = normalize_tool_result(recorded.content), normalize_tool_result(replayed)
        if expected == got:
            return
        self.diverged += 1
        for cause, names in difference_causes(expected, got).items():
            known = self.causes.setdefault(cause, [])
            known.extend(n[:FIELD_CHARS] for n in names if n[:FIELD_CHARS] not in known)
            del known[CAUSE_FIELDS:]
        if self.first is None:
            self.first = Divergence(recorded.message, tool, requestor, *_excerpts(expected, got))


@dataclass(frozen=True)
class RunScore:
    """One recorded run, its recorded reward and our reward, and how its replay went."""

    task_id: Any
    trial: int
    recorded_reward: float
    reward: float
    result: RewardResult | Tau2RewardResult | None
    """None when the run has no trajectory (it crashed in tau-bench)."""
    tool_results: int = 0
    """Recorded tool results compared with the replayed ones."""
    diverged_results: int = 0
    """Of those, the ones that differ (see :func:`normalize_tool_result`)."""
    first_divergence: Divergence | None = None
    foreign_tools: tuple[str, ...] = ()
    """The tools the agent called when the domain has none of them (tau2 files), else ``()``."""
    left_out: str = ""
    """Why the run is no judgement and stays out of the figures (``"infrastructure_error"``:
    tau2 1.x's termination reason, which its metrics leave out; ``"judge_failure"``: no
    verdict from the NL-assertion judge), ``""`` for a judged run."""
    divergence_causes: dict[str, list[str]] = field(default_factory=dict)
    """Why its results differ (:attr:`ResultCheck.causes`), ``{}`` when none does."""

    @property
    def agrees(self) -> bool:
        """Whether our reward equals the recorded one."""
        return abs(self.reward - self.recorded_reward) <= SUCCESS_TOLERANCE

    @property
    def diverged(self) -> bool:
        """Whether a replayed tool result differs from the recorded one (no clean judgement)."""
        return self.diverged_results > 0
