"""Actions and tasks: what an agent did, and what a task expects.

Tasks come in two shapes and both are accepted by :func:`task_from_dict`:
tau-bench's (``{"user_id", "instruction", "actions": [{"name", "kwargs"}],
"outputs"}``) and tau2's (``{"id", "user_scenario", "evaluation_criteria":
{"actions": [{"name", "arguments"}], "communicate_info"}}``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from hashlib import sha256
from typing import Any

RESPOND = "respond"
"""Name of the action that sends text to the user (tau-bench's convention)."""


@dataclass(frozen=True)
class Action:
    """One agent action: a tool call, or ``respond`` with ``{"content": text}``."""

    name: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """tau-bench's JSON form: ``{"name": ..., "kwargs": ...}``."""
        return {"name": self.name, "kwargs": dict(self.kwargs)}


@dataclass(frozen=True)
class Task:
    """A task: the user's instruction and the ground truth the reward compares to.

    ``actions`` are the ground-truth actions (replayed for the data check);
    ``outputs`` are strings that must appear in the agent's replies.
    ``requestors`` says who performs each ground-truth action (``"assistant"``
    or ``"user"``, tau2's dual control); empty means the agent performs all.
    ``history`` holds messages already exchanged before the episode starts
    (tau2's ``initial_state.message_history``): ``{"role", "content",
    "tool_calls": [{"name", "arguments"}]}``; their tool calls are already
    applied to the task's initial data.
    """

    task_id: str
    instruction: str
    actions: tuple[Action, ...]
    outputs: tuple[str, ...] = ()
    user_id: str | None = None
    requestors: tuple[str, ...] = ()
    history: tuple[Mapping[str, Any], ...] = field(default=(), compare=False)

    def requestor(self, index: int) -> str:
        """Who performs ground-truth action ``index``: ``"assistant"`` or ``"user"``."""
        return self.requestors[index] if index < len(self.requestors) else "assistant"

    def fingerprint(self) -> str:
        """Hex digest of the ground-truth actions: equal for tasks with equal replays.

        Computed once per task object (a task is never changed once built).
        """
        found = self.__dict__.get("_actions_digest")
        if found is None:
            actions: list[list[Any]] = [[action.name, action.kwargs] for action in self.actions]
            if "user" in self.requestors:
                actions = [[*a, self.requestor(i)] for i, a in enumerate(actions)]
            payload = json.dumps(actions, sort_keys=True, ensure_ascii=False, default=str)
            found = sha256(payload.encode("utf-8")).hexdigest()
            object.__setattr__(self, "_actions_digest", found)
        return found

    def to_dict(self) -> dict[str, Any]:
        """tau-bench's JSON form of the task (``info.task`` in its results files)."""
        return {
            "user_id": self.user_id,
            "actions": [action.to_dict() for action in self.actions],
            "instruction": self.instruction,
            "outputs": list(self.outputs),
        }


def _instruction_from_tau2(scenario: Mapping[str, Any]) -> str:
    instructions = scenario.get("instructions") or {}
    if isinstance(instructions, str):
        return instructions
    if not isinstance(instructions, Mapping):
        return str(instructions)
    parts = []
    if scenario.get("persona"):
        parts.append(f"Persona: {scenario['persona']}")
    for key, title in (
        ("known_info", "Known info"),
        ("reason_for_call", "Reason for call"),
        ("unknown_info", "Unknown info"),
        ("task_instructions", "Task instructions"),
    ):
        if instructions.get(key):
            parts.append(f"{title}: {instructions[key]}")
    return "\n".join(parts)


def _action_from_dict(raw: Any, where: str) -> Action:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("name"), str):
        raise ValueError(f"{where}: each action needs a string 'name'")
    kwargs = raw.get("kwargs", raw.get("arguments", {}))
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"{where}: action {raw['name']!r} kwargs must be an object")
    return Action(raw["name"], dict(kwargs))


def task_from_dict(raw: Mapping[str, Any], *, task_id: str | None = None) -> Task:
    """Build a :class:`Task` from tau-bench's or tau2's JSON form.

    Raises ``ValueError`` naming the field when the task is malformed.

    >>> task_from_dict({"instruction": "hi", "actions": [{"name": "x", "kwargs": {}}]}).actions
    (Action(name='x', kwargs={}),)
    """
    if not isinstance(raw, Mapping):
        raise ValueError("task must be an object")
    criteria = raw.get("evaluation_criteria")
    if criteria is not None:
        name = f"task {raw.get('id', task_id)!r}"
        if not isinstance(criteria, Mapping):
            raise ValueError(f"{name}: evaluation_criteria must be an object or null")
        gold = criteria.get("actions") or []
        communicate = criteria.get("communicate_info") or []
        scenario = raw.get("user_scenario") or {}
        if not isinstance(gold, list) or not isinstance(communicate, list):
            raise ValueError(
                f"{name}: evaluation_criteria.actions and .communicate_info must be lists or null"
            )
        if not isinstance(scenario, Mapping):
            raise ValueError(f"{name}: user_scenario must be an object or null")
        actions = tuple(_action_from_dict(a, f"{name} evaluation_criteria.actions") for a in gold)
        requestors = tuple(str(a.get("requestor") or "assistant") for a in gold)
        outputs = tuple(str(o) for o in communicate)
        instruction = _instruction_from_tau2(scenario)
        identifier = str(raw.get("id", task_id))
        if "user" not in requestors:
            requestors = ()
        return Task(identifier, instruction, actions, outputs, requestors=requestors)
    if "actions" not in raw:
        raise ValueError("task.actions is required")
    if not isinstance(raw["actions"], list):
        raise ValueError("task.actions must be a list")
    actions = tuple(_action_from_dict(a, "task.actions") for a in raw["actions"])
    outputs = raw.get("outputs") or []
    if not isinstance(outputs, list):
        raise ValueError("task.outputs must be a list of strings")
    user_id = raw.get("user_id")
    if user_id is not None and not isinstance(user_id, str):
        raise ValueError("task.user_id must be a string or null")
    return Task(
        task_id=str(raw.get("task_id", task_id)),
        instruction=str(raw.get("instruction", "")),
        actions=actions,
        outputs=tuple(str(o) for o in outputs),
        user_id=user_id,
    )
