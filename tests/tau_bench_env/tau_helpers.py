"""Shared helpers for the tau_bench_env tests: ground-truth trajectories as model text."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Sequence
from typing import Any

import pytest

from tau_bench_env.tasks import RESPOND, Action, Task

HAS_TAU_BENCH = importlib.util.find_spec("tau_bench") is not None
tau_bench_only = [
    pytest.mark.tau_bench,
    pytest.mark.skipif(not HAS_TAU_BENCH, reason="tau-bench is not installed"),
]


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
