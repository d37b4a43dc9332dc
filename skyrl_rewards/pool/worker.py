"""The body of one pool worker: a Ray actor that holds a reward mix and streams scores.

A worker is a synchronous actor with two lanes, each one call at a time: the
default concurrency group (``max_concurrency=1``) for ordinary calls, and
:data:`SLOW_LANE` for tasks deferred from a first pass, so that a slow math
check never holds up the ordinary stream. A third group, :data:`CONTROL`,
answers :meth:`RewardWorker.stop_at`, :meth:`RewardWorker.math_checks_running` and
:meth:`RewardWorker.scored` while both lanes are busy. The two lanes run in two threads and
share the worker's :class:`~skyrl_rewards.rewards.mix.RewardMix` (and any heavy
state, such as a tokenizer), built once, when the worker starts; the reward
components are thread-safe (math runs in child processes; tokenizers encode with
fixed settings).

:meth:`RewardWorker.score_tasks` is a streaming generator. It yields a
:class:`Progress` marker before the first task, then finished scores in order,
in small groups. The pool reads the stream to know how far a worker got, so
that a hang is pinned on one task and nothing else of the call is lost:

- a yield always comes immediately before the worker starts the next task;
- a task marked *fenced* in the first marker always has a yield right before it.

So when a stream goes quiet, the stuck task lies between the first unreported
task and the next fenced one.

Math-verify runs in a math child process with a CPU-time limit
(:mod:`skyrl_rewards.rewards.text.math_check`), so a math hang never hangs the
worker. With ``first_pass_s`` set, every math check of the call is capped at
that many CPU seconds; a task that needs more is reported with status
:data:`DEFERRED` (its value meaningless) for the pool to score again later,
alone and with its full limit (in the slow lane, with math children
``niceness`` steps nicer). A reward component whose mean time on this
worker is at least ``fence_min_s`` (or not yet measured) is fenced; cheap
components are reported in groups at most ``progress_interval_s`` apart.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.result import ComponentScore
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.text.math_check import first_pass, low_priority, recent_check_cpu_s

WARMUP_SAMPLE = {
    "completion": "<think>1</think><answer>1</answer>",
    "solution": "<answer>1</answer>",
}
"""Scored once per component when a worker starts, so lazy imports are not billed to real items."""

SLOW_LANE = "slow_lane"
"""The concurrency group of slow-lane calls (one at a time, beside the ordinary lane)."""

CONTROL = "control"
"""The concurrency group of :meth:`RewardWorker.stop_at`, :meth:`RewardWorker.math_checks_running`
and :meth:`RewardWorker.scored`: answered while both lanes score."""

CONCURRENCY_GROUPS = {SLOW_LANE: 1, CONTROL: 1}
"""``ray.remote(concurrency_groups=...)`` of the worker actor."""

DEFERRED = "deferred"
"""Status of a task whose math check needed more than the call's first-pass cap."""

FIRST_PASS_FACTOR = 4.0
"""The first-pass cap is at least this many times the p99 CPU time of the worker's recent checks."""
FIRST_PASS_MAX_S = 0.5
"""The first-pass cap never rises above this (CPU seconds)."""

_MEAN_DECAY = 0.8
logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Progress:
    """One message of a worker's stream.

    ``scores`` continue the call's task list where the previous message stopped,
    as ``(value, status, error, clamped)`` tuples (a :class:`ComponentScore`'s
    fields). ``fenced`` is set on the first message only: one flag per task,
    True when the worker yields right before that task.
    """

    scores: tuple[tuple[float, str, str, int], ...] = ()
    fenced: tuple[bool, ...] = ()


class RewardWorker:
    """Ray actor body. Build it with ``ray.remote(concurrency_groups=CONCURRENCY_GROUPS)(RewardWorker)``."""

    def __init__(
        self, rewards: Mapping[str, Mapping[str, Any]], niceness: int | None = None
    ) -> None:
        if niceness is not None:
            try:
                os.setpriority(os.PRIO_PROCESS, 0, niceness)
            except OSError as exc:  # lowering niceness needs privileges
                logger.warning(
                    "reward worker keeps niceness %d (cannot set %d: %s)",
                    os.getpriority(os.PRIO_PROCESS, 0),
                    niceness,
                    exc,
                )
        self._mix = RewardMix.from_config(rewards)
        self._mean_s: dict[str, float] = {}
        self._stops = threading.Lock()
        self._stop_at: dict[str, int] = {}
        """Call id -> the task index where that call stops; one entry per call streaming."""
        self._scored = 0
        """Tasks scored by :meth:`score_tasks` (both lanes; the warm-up is not counted)."""

    def ready(self) -> tuple[int, str]:
        """Warm every component up once; return ``(pid, node_id)`` of this worker."""
        import ray

        for name in self._mix.names:
            if self._mix.lane(name, WARMUP_SAMPLE) is None:  # model lanes never reach a worker
                self._timed_score(name, WARMUP_SAMPLE)
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def score_tasks(
        self,
        samples: Sequence[Mapping[str, Any]],
        tasks: Sequence[tuple[int, str]],
        progress_interval_s: float,
        fence_min_s: float,
        fence_all: bool,
        first_pass_s: float = 0.0,
        niceness: int = 0,
        call_id: str = "",
    ) -> Iterator[Progress]:
        """Score each ``(sample_index, component_name)`` task, streaming :class:`Progress`.

        Scores never raise (the mix turns every failure into a status). With
        ``fence_all`` every task is fenced, so a hang is pinned exactly. With
        ``first_pass_s > 0`` a task whose math check needs more CPU seconds
        than :func:`first_pass_cap` (at least ``first_pass_s``) has status
        :data:`DEFERRED`. Math checks run in children ``niceness`` steps nicer
        than usual. ``stop_at(call_id, index)`` ends the stream before task
        ``index`` (the tasks from there were handed to another worker); a call
        without an id (``""``) runs to its end.
        """
        if call_id:
            with self._stops:
                self._stop_at[call_id] = len(tasks)
        try:
            fenced = tuple(
                fence_all or self._mean_s.get(name, fence_min_s) >= fence_min_s for _, name in tasks
            )
            yield Progress(fenced=fenced)
            cap_s = first_pass_cap(first_pass_s)
            last_yield = time.perf_counter()
            pending: list[tuple[float, str, str, int]] = []
            for index, (sample_index, name) in enumerate(tasks):
                if index >= self._stop_at.get(call_id, len(tasks)):
                    break
                if pending and (
                    fenced[index] or time.perf_counter() - last_yield >= progress_interval_s
                ):
                    yield Progress(scores=tuple(pending))
                    pending = []
                    last_yield = time.perf_counter()
                with low_priority(niceness):
                    if first_pass_s > 0:
                        with first_pass(cap_s) as state:
                            score = self._timed_score(name, samples[sample_index])
                        status = DEFERRED if state.deferred else score.status.value
                    else:
                        score = self._timed_score(name, samples[sample_index])
                        status = score.status.value
                pending.append((float(score.value), status, score.error, score.clamped))
                with self._stops:
                    self._scored += 1
            yield Progress(scores=tuple(pending))
        finally:
            if call_id:
                with self._stops:
                    del self._stop_at[call_id]

    def math_checks_running(self) -> int:
        """Math children of this worker running now: checks bounded on CPU time, not hangs.

        They are the children of its math fork servers (its child processes
        running ``math_child``); read from Linux ``/proc`` (0 where it is missing).
        """
        parents: dict[int, int] = {}
        for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat", "rb") as handle:
                        parents[int(entry)] = int(handle.read().rsplit(b")", 1)[1].split()[1])
                except (OSError, IndexError, ValueError):  # gone meanwhile
                    continue
        servers = set()
        for pid, parent in parents.items():
            if parent == os.getpid():
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        if b"math_child" in handle.read():
                            servers.add(pid)
                except OSError:
                    continue
        return sum(parent in servers for parent in parents.values())

    def scored(self) -> int:
        """Tasks this worker has scored (computations, counted where they run)."""
        with self._stops:
            return self._scored

    def stop_at(self, call_id: str, index: int) -> None:
        """End the call ``call_id`` (if it still streams) before its task ``index``."""
        with self._stops:
            if call_id in self._stop_at:
                self._stop_at[call_id] = min(self._stop_at[call_id], index)

    def _timed_score(self, name: str, sample: Mapping[str, Any]) -> ComponentScore:
        start = time.perf_counter()
        score = self._mix.score_component(name, sample)
        elapsed_s = time.perf_counter() - start
        previous = self._mean_s.get(name)
        self._mean_s[name] = (
            elapsed_s
            if previous is None
            else (_MEAN_DECAY * previous + (1 - _MEAN_DECAY) * elapsed_s)
        )
        return score


def first_pass_cap(first_pass_s: float) -> float:
    """The CPU cap of a first pass: ``first_pass_s``, or more when this worker's checks need it.

    :data:`FIRST_PASS_FACTOR` x the p99 CPU time of the worker's recent math
    checks, between ``first_pass_s`` and :data:`FIRST_PASS_MAX_S` (never below
    ``first_pass_s``). So only checks far slower than the worker's ordinary
    ones are deferred: on answers whose p99 is 18 ms the cap stays at 0.1 s,
    and a hang costs that much of the ordinary stream; on heavier answers
    (p99 80 ms) it is 0.32 s, where 0.1 s would defer ordinary answers by the
    dozen.
    """
    if first_pass_s <= 0:
        return 0.0
    return max(first_pass_s, min(FIRST_PASS_MAX_S, FIRST_PASS_FACTOR * recent_check_cpu_s(0.99)))
