"""The user-simulator review of recorded runs: ``rescore --review-user`` and ``eval --review-user``.

Picks the failed runs of a results file (tau-bench's list of runs, which
``eval`` writes too, or tau2's ``Results``), gives each to the judge with the
user's instructions and the conversation
(:func:`~tau_bench_env.episode.user_review.review_many`), and summarises the
verdicts (:func:`~tau_bench_env.episode.user_review.summarize_reviews`).
A run the review could not judge is masked: counted as *review failed*, in
neither the simulator's count nor the agent's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from tau_bench_env.data_model.tasks import task_from_dict
from tau_bench_env.episode.user_review import ReviewCase, review_many, summarize_reviews
from tau_bench_env.rescoring.rescore import tau2_task
from tau_bench_env.rescoring.run_score import SUCCESS_TOLERANCE, RunScore
from tau_bench_env.rescoring.tau2_results import read_simulations

REVIEW_KEY = "user_review"
"""Where a run's review goes: ``info.user_review`` of an ``eval`` run; the summaries' key."""


def _call_text(call: Any) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping):
        return "[tool call]"
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return f"[tool call] {function.get('name')} {arguments}"


def traj_transcript(traj: Sequence[Any]) -> list[tuple[str, str | None]]:
    """A tau-bench ``traj`` as ``(role, content)`` pairs: the system prompt left out, each
    tool call as its caller's ``[tool call] NAME ARGUMENTS`` text, results as ``tool``.

    >>> traj_transcript([{"role": "system", "content": "policy"}, {"role": "user", "content": "Hi"},
    ...     {"role": "assistant", "content": None, "tool_calls": [
    ...         {"function": {"name": "find", "arguments": "{}"}}]}])
    [('user', 'Hi'), ('assistant', '[tool call] find {}')]
    """
    pairs: list[tuple[str, str | None]] = []
    for message in traj:
        if not isinstance(message, Mapping) or message.get("role") == "system":
            continue
        role = str(message.get("role"))
        content = message.get("content")
        if content:
            pairs.append((role, str(content)))
        pairs += [(role, _call_text(call)) for call in message.get("tool_calls") or []]
        if not content and not message.get("tool_calls"):
            pairs.append((role, None))
    return pairs


def traj_case(run: Mapping[str, Any]) -> ReviewCase:
    """The review case of a tau-bench run (``info.task`` in tau-bench's or tau2's form)."""
    task = task_from_dict(run["info"]["task"], task_id=str(run.get("task_id")))
    return ReviewCase(
        run.get("task_id"),
        int(run.get("trial") or 0),
        task.instruction,
        traj_transcript(run.get("traj") or []),
    )


def is_failed(score: RunScore, *, keep_diverged: bool) -> bool:
    """Whether a rescored run counts as a failure to review: scored (not left out, not
    diverged unless ``keep_diverged``) and paid less than 1.0."""
    if score.left_out or (score.diverged and not keep_diverged):
        return False
    return score.reward < 1.0 - SUCCESS_TOLERANCE


def review_rescored(
    runs: Any,
    scores: Sequence[RunScore],
    judge: Mapping[str, Any],
    *,
    results_format: str,
    keep_diverged: bool = False,
) -> dict[str, Any]:
    """Review the failed runs of a rescored file (:func:`is_failed`); their summary.

    ``runs`` is the parsed file, ``scores`` what
    :func:`~tau_bench_env.rescoring.rescore.rescore` gave for it (one per run, in
    file order). A tau2 run's case is its task's instructions and its own messages.
    """
    if results_format == "tau2":
        simulations = read_simulations(runs)
        every = [
            ReviewCase(s.task_id, s.trial, tau2_task(s).instruction, s.transcript)
            for s in simulations
        ]
    else:
        every = [traj_case(run) for run in runs]
    cases = [
        case
        for case, score in zip(every, scores, strict=True)
        if is_failed(score, keep_diverged=keep_diverged)
    ]
    return summarize_reviews(cases, review_many(cases, judge))


def review_eval_runs(runs: Sequence[dict[str, Any]], judge: Mapping[str, Any]) -> dict[str, Any]:
    """Review the failed runs of an evaluation; each run's review goes to its
    ``info.user_review`` (the dict is changed in place); returns their summary."""
    failed = [r for r in runs if float(r["reward"]) < 1.0 - SUCCESS_TOLERANCE]
    cases = [traj_case(run) for run in failed]
    reviews = review_many(cases, judge)
    for run, review in zip(failed, reviews, strict=True):
        run["info"][REVIEW_KEY] = review.to_dict()
    return summarize_reviews(cases, reviews)
