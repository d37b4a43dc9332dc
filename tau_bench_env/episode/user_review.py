"""Did the user simulator break the task? A judge reviews a failed run (tau2-bench PR #392).

tau2-bench PR #392 found that up to 30% of the failed retail runs of a model
failed because of the user simulator, not the agent: it ended the
conversation before the agent had done the work (``###STOP###`` right after
confirming), it asked for something the instructions did not, it gave data
that contradicts them. A training signal built on those runs punishes the
policy for the simulator's mistakes; an eval figure counts them as the agent's.

:func:`review_many` asks the judge endpoint (an OpenAI-compatible chat
endpoint, configured as the ``NL_ASSERTION`` judge is:
:meth:`~skyrl_rewards.rewards.models.judge_client.EndpointConfig.from_mapping`,
its limits, retries, circuit breaker and ``deadline_s``), for each run, with
the user's instructions and the conversation (:func:`review_messages`,
this package's own prompt), for one strict JSON verdict
``{"at_fault": bool, "category": str, "reason": str}``; ``category`` is one
of :data:`CATEGORIES` when ``at_fault``, ``"none"`` otherwise.

A call that fails, or a reply :func:`parse_verdict` cannot read, is a
:class:`UserReview` with ``failure`` set: the caller masks that run (it is
counted as *review failed*, never as the simulator's fault nor as the agent's).
:func:`summarize_reviews` and :func:`review_line` give the figures: failed
runs reviewed, the simulator's share with its categories, review failures,
overall and per task.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest, endpoint_key
from skyrl_rewards.rewards.models.judge_client import run_judge_requests

CATEGORIES = {
    "ended_early": "ended early",
    "left_instructions": "left the instructions",
    "wrong_data": "gave wrong data",
    "withheld_data": "withheld data",
    "other": "other",
}
"""The simulator's mistakes a verdict may name (key) and how summaries word them (value)."""

NOT_AT_FAULT = "none"
"""The category of a verdict that finds the simulator not at fault."""

MAX_REASON_CHARS = 1_000
"""A verdict's reason is cut to this many characters (it travels in results and metadata)."""
MAX_REPLY_CHARS = 20_000
"""A judge's reply is cut to this many characters before it is searched for its JSON object
(a longer reply whose object ends past the cut is unreadable: review failed)."""

SYSTEM_PROMPT = """You review one failed run of a customer-service benchmark.
A simulated user (an LLM playing a customer) talks to an AI agent. The simulated user was given
instructions: who they are, what they know, what they want, what they must or must not accept.
The run failed: the agent did not reach the expected outcome. Decide whether the SIMULATED USER,
not the agent, caused the failure by not following its instructions.

The simulated user is at fault only when one of these happened and it plausibly caused the failure:
- ended_early: the user ended the conversation (###STOP###, ###TRANSFER###, goodbye) before the
  task was done, e.g. right after confirming an action the agent had not yet performed;
- left_instructions: the user asked for or accepted something its instructions did not allow, or
  did not ask for what they required, or changed its goal;
- wrong_data: the user gave information that contradicts its instructions (ids, names, numbers,
  dates, choices);
- withheld_data: the user refused or failed to give information its instructions hold when the
  agent asked for it;
- other: another departure from the instructions that caused the failure.

The user is NOT at fault when the agent erred (wrong tool, wrong arguments, policy violations, gave
up, misunderstood), when the user followed its instructions, or when you cannot tell. In the
conversation, a tool call shows as "assistant: None" (or "assistant: [tool call] NAME ARGUMENTS")
followed by its result, "tool: ..."; a call by the user (on its own device) as "user: ...".

Answer with one JSON object and nothing else:
{"at_fault": true or false, "category": "<ended_early|left_instructions|wrong_data|withheld_data|other, or none when not at fault>", "reason": "<one or two sentences citing the messages>"}"""
"""The system prompt of the review (this package's own)."""


@dataclass(frozen=True)
class UserReview:
    """The judge's review of one failed run.

    ``at_fault`` with a ``category`` of :data:`CATEGORIES` (``"none"`` when
    not at fault) and the judge's ``reason``; or ``failure`` (the call failed
    or the reply could not be read: the run is masked, ``at_fault`` False).
    """

    at_fault: bool = False
    category: str = NOT_AT_FAULT
    reason: str = ""
    failure: str = ""

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: ``{"failure"}`` for a failed review, else the verdict's three fields."""
        if self.failure:
            return {"failure": self.failure}
        return {k: v for k, v in asdict(self).items() if k != "failure"}


@dataclass(frozen=True)
class ReviewCase:
    """One failed run to review: its task, trial, the user's instructions and the conversation."""

    task_id: Any
    trial: int
    instruction: str
    transcript: Sequence[tuple[str, str | None]]


def render_conversation(transcript: Sequence[tuple[str, str | None]]) -> str:
    """``"{role}: {content}"`` lines (tau2's rendering, as the NL-assertion judge reads it).

    >>> render_conversation([("user", "Hi"), ("assistant", None), ("tool", "ok")])
    'user: Hi\\nassistant: None\\ntool: ok'
    """
    return "\n".join(f"{role}: {content}" for role, content in transcript)


def review_messages(case: ReviewCase) -> list[dict[str, str]]:
    """The chat messages sent to the judge: :data:`SYSTEM_PROMPT`, then instructions and run."""
    user = (
        f"The simulated user's instructions:\n{case.instruction}\n\n"
        f"The conversation:\n{render_conversation(case.transcript)}"
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


_FENCED = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def _json_object(text: str) -> Any:
    """The JSON object of a reply: the whole text, a fenced block, or from the first ``{`` to
    the last ``}`` (of its first :data:`MAX_REPLY_CHARS`); ``ValueError`` when none is JSON."""
    stripped = text[:MAX_REPLY_CHARS].strip()
    candidates = [stripped]
    fenced = _FENCED.search(stripped)
    if fenced:
        candidates.append(fenced.group(1).strip())
    if "{" in stripped and "}" in stripped:
        candidates.append(stripped[stripped.index("{") : stripped.rindex("}") + 1])
    for candidate in candidates:
        try:
            return json.loads(candidate)
        except (ValueError, RecursionError):
            continue
    raise ValueError(f"the judge's reply holds no JSON object: {text[:200]!r}")


def parse_verdict(text: str) -> UserReview:
    """The verdict in the judge's reply; ``ValueError`` naming what is wrong.

    ``at_fault`` must be a JSON boolean; when true, ``category`` one of
    :data:`CATEGORIES` (case, spaces and hyphens aside); ``reason`` a string.

    >>> parse_verdict('{"at_fault": true, "category": "Ended early", "reason": "stopped"}')
    UserReview(at_fault=True, category='ended_early', reason='stopped', failure='')
    >>> parse_verdict('```json\\n{"at_fault": false, "category": "none", "reason": "ok"}\\n```').at_fault
    False
    """
    data = _json_object(text)
    if not isinstance(data, Mapping):
        raise ValueError(f"the judge's reply is not a JSON object: {text[:200]!r}")
    at_fault, reason = data.get("at_fault"), data.get("reason")
    if not isinstance(at_fault, bool):
        raise ValueError(f"the judge's at_fault is not true or false: {at_fault!r:.80}")
    if not isinstance(reason, str):
        raise ValueError(f"the judge's reason is not a string: {reason!r:.80}")
    if not at_fault:
        return UserReview(False, NOT_AT_FAULT, reason[:MAX_REASON_CHARS])
    category = re.sub(r"[\s-]+", "_", str(data.get("category", "")).strip().lower())
    if category not in CATEGORIES:
        raise ValueError(
            f"the judge's category {data.get('category')!r:.80} is not one of {list(CATEGORIES)}"
        )
    return UserReview(True, category, reason[:MAX_REASON_CHARS])


def review_many(cases: Sequence[ReviewCase], judge: Mapping[str, Any]) -> list[UserReview]:
    """Review every case with the ``judge`` endpoint, the requests concurrent under its limits;
    one :class:`UserReview` per case, in order.

    The wait is bounded by the endpoint's ``deadline_s``. Never raises for what
    the judge did or wrote (a review with ``failure`` instead); raises
    ``ValueError`` for a bad configuration or an unset API key variable.
    """
    key = endpoint_key(dict(judge))
    requests = [
        ModelRequest(JUDGE_LANE, key, {"messages": review_messages(case)}) for case in cases
    ]
    return [_review(outcome) for outcome in run_judge_requests(requests, {key: judge})]


def _review(outcome: Any) -> UserReview:
    """The review of one judge outcome (:class:`~skyrl_rewards.rewards.contract.lanes.ModelOutcome`)."""
    if not outcome.ok:
        return UserReview(failure=f"judge {outcome.failure}: {outcome.message}"[:500])
    try:
        return parse_verdict(outcome.text)
    except ValueError as error:
        return UserReview(failure=f"judge bad_reply: {error}"[:500])


def _counts(reviews: Sequence[UserReview]) -> dict[str, Any]:
    verdicts = [r for r in reviews if not r.failure]
    at_fault = [r for r in verdicts if r.at_fault]
    categories: dict[str, int] = {}
    for review in at_fault:
        categories[review.category] = categories.get(review.category, 0) + 1
    return {
        "failed_runs": len(reviews),
        "reviewed": len(verdicts),
        "at_fault": len(at_fault),
        "share": len(at_fault) / len(verdicts) if verdicts else None,
        "categories": dict(sorted(categories.items(), key=lambda item: (-item[1], item[0]))),
        "review_failed": len(reviews) - len(verdicts),
    }


def summarize_reviews(cases: Sequence[ReviewCase], reviews: Sequence[UserReview]) -> dict[str, Any]:
    """The review's figures (JSON-able), overall and per task.

    ``failed_runs``: the runs reviewed; ``reviewed``: those with a verdict;
    ``at_fault``: of those, the simulator's; ``share``: ``at_fault / reviewed``
    (None without a verdict); ``categories``: at-fault runs per category;
    ``review_failed``: runs without a verdict (masked: in neither count).
    ``per_task`` maps each task id (a string) to the same counts; ``runs``
    lists every run's ``task_id``, ``trial`` and review (:meth:`UserReview.to_dict`).
    """
    by_task: dict[str, list[UserReview]] = {}
    for case, review in zip(cases, reviews, strict=True):
        by_task.setdefault(str(case.task_id), []).append(review)
    return {
        **_counts(reviews),
        "per_task": {task: _counts(found) for task, found in by_task.items()},
        "runs": [
            {"task_id": case.task_id, "trial": case.trial, **review.to_dict()}
            for case, review in zip(cases, reviews, strict=True)
        ],
    }


def review_line(summary: Mapping[str, Any]) -> str:
    """The summary's line on the review.

    >>> review_line({"failed_runs": 4, "reviewed": 3, "at_fault": 1, "share": 1 / 3,
    ...              "categories": {"ended_early": 1}, "review_failed": 1})
    'user simulator at fault in 1 of 3 failed runs reviewed (33%): ended early 1; review failed for 1 of 4 (masked: counted neither way)'
    """
    if not summary["failed_runs"]:
        return "user simulator review: no failed run to review"
    if summary["reviewed"]:
        line = (
            f"user simulator at fault in {summary['at_fault']} of {summary['reviewed']} failed "
            f"runs reviewed ({summary['share']:.0%})"
        )
        if summary["categories"]:
            line += ": " + ", ".join(
                f"{CATEGORIES[name]} {count}" for name, count in summary["categories"].items()
            )
    else:
        line = "user simulator at fault: n/a (no review gave a verdict)"
    if summary["review_failed"]:
        line += (
            f"; review failed for {summary['review_failed']} of {summary['failed_runs']} "
            "(masked: counted neither way)"
        )
    return line


MAX_TASK_LINES = 20
"""Tasks the text summary lists one by one (all of them are in the JSON)."""


def review_lines(summary: Mapping[str, Any]) -> list[str]:
    """:func:`review_line`, then the tasks where the simulator was at fault or a review failed,
    each with its runs' reasons."""
    lines = [review_line(summary)]
    reasons: dict[str, list[str]] = {}
    for run in summary["runs"]:
        if run.get("at_fault") or run.get("failure"):
            said = (
                f"review failed: {run['failure']}"
                if run.get("failure")
                else f"{CATEGORIES[run['category']]}: {run['reason']}"
            )
            reasons.setdefault(str(run["task_id"]), []).append(
                f"trial {run['trial']}: {said}"[:300]
            )
    for task, runs in list(reasons.items())[:MAX_TASK_LINES]:
        counts = summary["per_task"][task]
        lines.append(
            f"  task {task}: at fault in {counts['at_fault']} of {counts['reviewed']} reviewed"
            + (f", review failed {counts['review_failed']}" if counts["review_failed"] else "")
        )
        lines.extend(f"    {reason}" for reason in runs)
    if len(reasons) > MAX_TASK_LINES:
        lines.append(f"  ... and {len(reasons) - MAX_TASK_LINES} more tasks (JSON: user_review)")
    return lines
