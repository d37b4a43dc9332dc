"""The protocols other trainers already speak, as rows for the pool and answers from its results.

- OpenRLHF's remote reward model (``--remote_rm_url http://HOST:PORT/get_reward``):
  ``{"query": [...], "prompts": [...], "labels": [...]}`` in, where a query is
  the prompt followed by the response; ``{"rewards": [...], "scores": [...],
  "extra_logs": {...}}`` out (OpenRLHF's ``SingleTurnAgentExecutor`` reads the
  three keys). A label is the row's ``solution``, or an object of the row's
  columns (``solution`` and the rest).
- NeMo-Gym's ``/verify`` (its ``BaseVerifyRequest`` / ``BaseMultiRewardVerifyResponse``):
  ``responses_create_params`` and ``response`` (a Responses API response) plus
  the task's fields; the answer echoes the request with ``reward``,
  ``reward_components``, ``mask_sample``, ``failure_kind`` and ``failure_reason``.

Neither protocol can say "masked" in its reward list the way the pool does:
OpenRLHF gets the fallback value with ``extra_logs["masked"]`` set to 1.0 (its
dynamic filtering and logs see it), NeMo-Gym gets ``mask_sample: true``, the
kind and the cause.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.serve.wire import BadRequest, cause_of, check_count, field_of, type_name

VERIFY_ENVELOPE = ("responses_create_params", "response")
"""The fields of NeMo-Gym's verify request that are not the task's own columns."""
ROLLOUT_ID_ALIAS = "_ng_rollout_id"
"""NeMo-Gym's capture id: read by its server, left out of the echoed answer (``exclude=True``)."""


def openrlhf_rows(document: Any, *, max_rows: int) -> list[dict[str, Any]]:
    """The rows of an OpenRLHF ``/get_reward`` request.

    A row's ``completion`` is the query without its prompt (the whole query when
    it does not start with the prompt); a string label is its ``solution``, an
    object label its columns.
    """
    queries = field_of(document, "query", list)
    check_count(len(queries), max_rows)
    prompts = _parallel(document, "prompts", len(queries), str)
    labels = _parallel(document, "labels", len(queries), (str, dict))
    rows = []
    for index, (query, prompt, label) in enumerate(zip(queries, prompts, labels, strict=True)):
        if not isinstance(query, str):
            raise BadRequest(f"body.query[{index}]: expected string, got {type_name(query)}")
        completion = query[len(prompt) :] if query.startswith(prompt) else query
        columns = dict(label) if isinstance(label, dict) else {"solution": label}
        rows.append({**columns, "prompt": prompt, "completion": completion})
    return rows


def _parallel(document: dict[str, Any], name: str, count: int, kind: Any) -> list[Any]:
    values = field_of(document, name, list)
    if len(values) != count:
        raise BadRequest(f"body.{name}: {len(values)} entries for {count} queries")
    for index, value in enumerate(values):
        if value is None and name == "labels":
            raise BadRequest(
                f"body.labels[{index}]: null; start OpenRLHF with --label_key naming the "
                "dataset's answer column (it becomes the row's solution)"
            )
        if not isinstance(value, kind):
            raise BadRequest(f"body.{name}[{index}]: got {type_name(value)}")
    return values


def openrlhf_response(results: Sequence[RewardResult]) -> dict[str, Any]:
    """``{"rewards", "scores", "extra_logs"}``: totals, and per component its values and ``masked``."""
    totals = [result.total for result in results]
    names = list(dict.fromkeys(name for result in results for name in result.components))
    extra_logs: dict[str, list[float]] = {  # one mix: every row has the same components
        name: [result.components.get(name, 0.0) for result in results] for name in names
    }
    extra_logs["masked"] = [1.0 if result.should_mask else 0.0 for result in results]
    return {"rewards": totals, "scores": totals, "extra_logs": extra_logs}


def verify_row(document: Any) -> dict[str, Any]:
    """The row of a NeMo-Gym ``/verify`` request: the response's output text and the task's fields."""
    field_of(document, "responses_create_params", dict)
    response = field_of(document, "response", dict)
    output = field_of(response, "output", list, "body.response")
    columns = {
        key: value
        for key, value in document.items()
        if key not in VERIFY_ENVELOPE and key != ROLLOUT_ID_ALIAS
    }
    return {**columns, "completion": output_text(output)}


def output_text(output: list[Any]) -> str:
    """The text of every ``output_text`` part of the response's ``message`` items, joined
    (what the Responses API's ``output_text`` gives); reasoning and tool calls are left out."""
    parts = []
    for index, item in enumerate(output):
        if not isinstance(item, dict):
            raise BadRequest(
                f"body.response.output[{index}]: expected object, got {type_name(item)}"
            )
        if item.get("type") != "message":
            continue
        content = item.get("content")
        if not isinstance(content, list):
            raise BadRequest(f"body.response.output[{index}].content: expected array")
        parts += [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "output_text"
            and isinstance(part.get("text"), str)
        ]
    return "".join(parts)


def verify_response(document: dict[str, Any], result: RewardResult) -> dict[str, Any]:
    """NeMo-Gym's verify answer: the request echoed, the reward, its components and the mask."""
    echoed = {key: value for key, value in document.items() if key != ROLLOUT_ID_ALIAS}
    return {
        **echoed,
        "reward": result.total,
        "reward_components": dict(result.components),
        "mask_sample": result.should_mask,
        "failure_kind": failure_kind(result),
        "failure_reason": cause_of(result),
    }


def failure_kind(result: RewardResult) -> str | None:
    """NeMo-Gym's name for why a masked row failed (``judge_failed``, ``verifier_error``), else None."""
    if not result.should_mask:
        return None
    return "judge_failed" if "judge" in result.errors else "verifier_error"
