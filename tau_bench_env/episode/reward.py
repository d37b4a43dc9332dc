"""tau-bench's binary episode reward: data hash plus required outputs.

At done the reward starts at 1.0 and drops to 0.0 when

- the episode's data hash differs from the hash after replaying the task's
  ground-truth actions on fresh data (``r_actions``), or
- the task lists outputs and one of them occurs in none of the agent's
  ``respond`` contents (``r_outputs``; ``output.lower() in
  content.lower().replace(",", "")``, tau-bench's exact test), or
- the episode was cut off by the turn limit (unless configured otherwise).

A stricter outputs check (:func:`check_outputs_strict`) is always reported
beside tau-bench's (``r_outputs_strict``) and decides the reward only when
asked (``strict_outputs``), so published-score comparisons stay possible.

The replay runs on its own fork of the shared data: it never touches an
episode's data, action log or user simulator. Its hash depends only on the
task, so it is computed once per (domain, task) and shared by every episode.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from tau_bench_env.backends.protocol import Domain, ServiceUnavailableError
from tau_bench_env.config import DEFAULT_TOOL_TIMEOUT_S
from tau_bench_env.data_model.tasks import RESPOND, Action, Task


def run_action(
    domain: Domain,
    data: Any,
    action: Action,
    *,
    tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S,
    requestor: str = "assistant",
) -> str:
    """Run one tool action on ``data`` and return its observation, as tau-bench does.

    An unknown tool gives ``"Unknown action <name>"``; a tool that raises gives
    ``"Error: <message>"`` (tau-bench catches every exception from domain
    code and shows it to the agent; so do we, and only here). So does a call
    refused or stopped by a bound (:mod:`tau_bench_env.backends.tool_limits`; the CPU
    budget is ``tool_timeout_s``), and then the episode goes on. A service the tool
    needs failing (:class:`~tau_bench_env.backends.protocol.ServiceUnavailableError`) is
    raised: the caller voids the episode.
    ``requestor`` ``"user"`` runs a tool of the user's side (``domain.user_tools``).
    """
    tools = domain.user_tools if requestor == "user" else domain.tools
    if action.name not in tools:
        return f"Unknown action {action.name}"
    try:
        return domain.run_tool(
            data, action.name, action.kwargs, cpu_limit_s=tool_timeout_s, requestor=requestor
        )
    except ServiceUnavailableError:
        raise
    except Exception as error:  # noqa: BLE001 - domain code errors are observations
        return f"Error: {error}"


def replay_hash(domain: Domain, task: Task) -> str:
    """Hash of the task's initial data after its ground-truth actions (no caching).

    Skips ``respond`` actions and terminate tools; a failing action is ignored.
    A user-side action (``task.requestor(i) == "user"``) runs on the user's side.
    """
    data = domain.initial_data(task)
    for index, action in enumerate(task.actions):
        if action.name == RESPOND or action.name in domain.terminate_tools:
            continue
        run_action(domain, data, action, requestor=task.requestor(index))
    return domain.data_digest(data)


class GroundTruthCache:
    """Ground-truth hashes, computed once per (domain, task fingerprint); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[tuple[str, str], threading.Lock] = {}
        self._hashes: dict[tuple[str, str], str] = {}
        self.computations = 0
        """How many replays ran (for tests and metrics)."""

    def get(self, domain: Domain, task: Task) -> str:
        """Return the ground-truth hash of ``task`` on ``domain``, replaying at most once."""
        key = (domain.key, task.fingerprint())
        found = self._hashes.get(key)
        if found is not None:
            return found
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            found = self._hashes.get(key)
            if found is None:
                found = replay_hash(domain, task)
                self._hashes[key] = found
                with self._lock:
                    self.computations += 1
        return found

    def clear(self) -> None:
        """Forget every hash."""
        with self._lock:
            self._hashes.clear()
            self._key_locks.clear()


GROUND_TRUTH = GroundTruthCache()
"""The process-wide cache every episode uses."""


def check_outputs(outputs: Iterable[str], responses: Sequence[str]) -> dict[str, bool]:
    """For each output, whether some response contains it (tau-bench's test).

    >>> check_outputs(["1093.34"], ["That is $1,093.34."])
    {'1093.34': True}
    """
    cleaned = [response.lower().replace(",", "") for response in responses]
    return {output: any(output.lower() in text for text in cleaned) for output in outputs}


_NUMBER = re.compile(r"(?<![\w#.])[-+]?\$?\d[\d,]*(?:\.\d+)?(?![\w])")


def _as_number(text: str) -> Decimal | None:
    try:
        value = Decimal(text.replace(",", "").replace("$", ""))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


def check_outputs_strict(outputs: Iterable[str], responses: Sequence[str]) -> dict[str, bool]:
    """For each output, whether some response states it as a whole token.

    A numeric output matches a number in a response by value (``$625.6``
    states 625.60; ``#W2100`` states no 10); any other output matches
    case-insensitively between non-word characters.

    >>> check_outputs_strict(["625.60", "10", "gold"], ["$625.6 for #W2100, Gold member"])
    {'625.60': True, '10': False, 'gold': True}
    """
    numbers = {_as_number(m) for r in responses for m in _NUMBER.findall(r)} - {None}
    lowered = [response.lower() for response in responses]
    found: dict[str, bool] = {}
    for output in outputs:
        value = _as_number(output.strip())
        if value is not None:
            found[output] = value in numbers
        else:
            pattern = re.compile(r"(?<!\w)" + re.escape(output.strip().lower()) + r"(?!\w)")
            found[output] = any(pattern.search(text) for text in lowered)
    return found


@dataclass(frozen=True)
class RewardResult:
    """The reward and which check failed.

    ``r_outputs`` and ``r_outputs_strict`` are None when the task lists no
    outputs. ``failed`` names the failed checks: ``"data_hash"``,
    ``"outputs"`` (the check in force: tau-bench's, or the strict one when
    asked), ``"truncated"``.
    """

    reward: float
    r_actions: bool
    data_hash: str
    gt_data_hash: str
    r_outputs: bool | None = None
    outputs: dict[str, bool] = field(default_factory=dict)
    missing_outputs: tuple[str, ...] = ()
    r_outputs_strict: bool | None = None
    missing_outputs_strict: tuple[str, ...] = ()
    truncated: bool = False
    failed: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for metadata and reports)."""
        result = asdict(self)
        result["missing_outputs"] = list(self.missing_outputs)
        result["missing_outputs_strict"] = list(self.missing_outputs_strict)
        result["failed"] = list(self.failed)
        return result


def score_episode(
    domain: Domain,
    task: Task,
    data_hash: str,
    actions: Sequence[Action],
    *,
    truncated: bool = False,
    score_truncated: bool = False,
    strict_outputs: bool = False,
    cache: GroundTruthCache = GROUND_TRUTH,
) -> RewardResult:
    """Score an ended episode from its data hash and its action log.

    ``truncated`` marks an episode cut off by the turn limit: it scores 0.0
    unless ``score_truncated`` (the checks are still reported).
    ``strict_outputs`` makes :func:`check_outputs_strict` decide the outputs check.
    """
    gt_hash = cache.get(domain, task)
    failed: list[str] = []
    r_actions = data_hash == gt_hash
    if not r_actions:
        failed.append("data_hash")
    r_outputs: bool | None = None
    r_strict: bool | None = None
    outputs: dict[str, bool] = {}
    strict: dict[str, bool] = {}
    if task.outputs:
        responses = [str(a.kwargs.get("content", "")) for a in actions if a.name == RESPOND]
        outputs = check_outputs(task.outputs, responses)
        strict = check_outputs_strict(task.outputs, responses)
        r_outputs, r_strict = all(outputs.values()), all(strict.values())
        if not (r_strict if strict_outputs else r_outputs):
            failed.append("outputs")
    if truncated and not score_truncated:
        failed.append("truncated")
    return RewardResult(
        reward=0.0 if failed else 1.0,
        r_actions=r_actions,
        data_hash=data_hash,
        gt_data_hash=gt_hash,
        r_outputs=r_outputs,
        outputs=outputs,
        missing_outputs=tuple(o for o, found in outputs.items() if not found),
        r_outputs_strict=r_strict,
        missing_outputs_strict=tuple(o for o, found in strict.items() if not found),
        truncated=truncated,
        failed=tuple(failed),
    )
