"""Backend ``tau_bench``: the real tau-bench package (retail and airline).

tau-bench is not on the package index; install it from its repository
(``pip install /path/to/tau-bench``). Importing it imports ``litellm``, which
by default fetches a model price list over the network at import time; this
module sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless the caller chose
otherwise, so that loading the backend works offline.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.task_sets import TaskSet, distribution_version, task_files_digest
from tau_bench_env.data_model.episode_data import EpisodeData
from tau_bench_env.data_model.hashing import HashIndex
from tau_bench_env.data_model.tasks import Action, Task

NAME = "tau_bench"
DOMAINS = ("airline", "retail")
SPLITS = {
    "airline": {"test": ("tasks_test", "TASKS")},
    "retail": {
        "test": ("tasks_test", "TASKS_TEST"),
        "train": ("tasks_train", "TASKS_TRAIN"),
        "dev": ("tasks_dev", "TASKS_DEV"),
    },
}
TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
READ_ONLY_TOOLS = {
    "airline": frozenset(
        {
            "calculate",
            "get_reservation_details",
            "get_user_details",
            "list_all_airports",
            "search_direct_flight",
            "search_onestop_flight",
            "think",
            "transfer_to_human_agents",
        }
    ),
    "retail": frozenset(
        {
            "calculate",
            "find_user_id_by_email",
            "find_user_id_by_name_zip",
            "get_order_details",
            "get_product_details",
            "get_user_details",
            "list_all_product_types",
            "think",
            "transfer_to_human_agents",
        }
    ),
}
"""Tools that never mutate the data (checked by the tests); all others clone on access."""


class TauBenchTool:
    """Calls one tau-bench ``Tool.invoke(data=..., **kwargs)``."""

    def __init__(self, tool: Any) -> None:
        self._tool = tool

    def __call__(self, data: EpisodeData, kwargs: Mapping[str, Any]) -> str:
        return self._tool.invoke(data=data, **kwargs)


class _SplitLoader:
    """Imports one task module on first use and converts its tasks."""

    def __init__(self, domain: str, module: str, attribute: str) -> None:
        self._path = f"tau_bench.envs.{domain}.{module}"
        self._attribute = attribute
        self._tasks: list[Task] | None = None

    def __call__(self) -> Sequence[Task]:
        if self._tasks is None:
            raw = getattr(importlib.import_module(self._path), self._attribute)
            self._tasks = [
                Task(
                    task_id=str(index),
                    instruction=task.instruction,
                    actions=tuple(Action(a.name, dict(a.kwargs)) for a in task.actions),
                    outputs=tuple(task.outputs),
                    user_id=task.user_id,
                )
                for index, task in enumerate(raw)
            ]
        return self._tasks


def task_set(name: str) -> TaskSet:
    """The task set of domain ``name``: tau-bench's version and its task modules."""
    folder = Path(importlib.import_module(f"tau_bench.envs.{name}").__file__).parent
    return TaskSet(
        source="tau-bench",
        version=distribution_version("tau_bench", "tau-bench"),
        digest=task_files_digest(folder.glob("tasks*.py")),
    )


def load_domain(name: str) -> Domain:
    """Load tau-bench domain ``name`` (``"airline"`` or ``"retail"``)."""
    if name not in DOMAINS:
        raise ValueError(
            f"domain {name!r} is not a tau_bench domain; choose one of {list(DOMAINS)}"
        )
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    data_module = importlib.import_module(f"tau_bench.envs.{name}.data")
    tools_module = importlib.import_module(f"tau_bench.envs.{name}.tools")
    wiki_module = importlib.import_module(f"tau_bench.envs.{name}.wiki")
    base = data_module.load_data()
    tools = {t.get_info()["function"]["name"]: TauBenchTool(t) for t in tools_module.ALL_TOOLS}
    splits = {
        split: _SplitLoader(name, module, attribute)
        for split, (module, attribute) in SPLITS[name].items()
    }
    return Domain(
        backend=NAME,
        name=name,
        base_data=base,
        tools=tools,
        tool_schemas=tuple(t.get_info() for t in tools_module.ALL_TOOLS),
        terminate_tools=TERMINATE_TOOLS,
        read_only_tools=READ_ONLY_TOOLS[name],
        policy=wiki_module.WIKI,
        splits=splits,
        hash_index=HashIndex(base),
        task_set=task_set(name),
    )
