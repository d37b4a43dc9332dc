"""Backend ``tau_bench``: the real tau-bench package (retail and airline).

tau-bench is not on the package index; install it from its repository
(``pip install /path/to/tau-bench``). Importing it imports ``litellm``, which
by default fetches a model price list over the network at import time; this
module sets ``LITELLM_LOCAL_MODEL_COST_MAP=True`` unless the caller chose
otherwise, so that loading the backend works offline.

The domain's data, tools, policy and tasks are tau-bench's own modules,
imported without the ``__init__`` of ``tau_bench``, ``tau_bench.envs`` and
``tau_bench.envs.<domain>`` (:func:`_domain_modules`): those import its
environment and user simulator, and with them litellm (about 3 s of a quiet
machine's time, most of a ``rescore``), which the domain's modules do not use.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import threading
import types
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
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
            with _domain_modules(self._path.split(".")[2]):
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


_PACKAGES_LOCK = threading.Lock()


@contextmanager
def _domain_modules(domain: str) -> Iterator[None]:
    """While the block runs, ``tau_bench.envs.<domain>.*`` import without their packages'
    ``__init__`` (see the module docstring).

    Each of ``tau_bench``, ``tau_bench.envs`` and ``tau_bench.envs.<domain>`` not
    yet imported stands in as a bare package (its folder, no code run). Afterwards
    the bare packages and every ``tau_bench`` module imported under them leave
    ``sys.modules`` (the caller keeps what it took from them), so a later ``import
    tau_bench`` imports tau-bench whole, as if this had not run. Without
    tau-bench installed nothing changes (the import then fails as usual).
    """
    with _PACKAGES_LOCK:
        spec = importlib.util.find_spec("tau_bench")
        names = ("tau_bench", "tau_bench.envs", f"tau_bench.envs.{domain}")
        if spec is None or not spec.submodule_search_locations or names[0] in sys.modules:
            yield
            return
        root = Path(next(iter(spec.submodule_search_locations)))
        for name in names:
            package = types.ModuleType(name)
            package.__path__ = [str(root.joinpath(*name.split(".")[1:]))]
            package.__package__ = name
            sys.modules[name] = package
        try:
            yield
        finally:
            for name in [n for n in sys.modules if n == "tau_bench" or n.startswith("tau_bench.")]:
                del sys.modules[name]


def task_set(name: str) -> TaskSet:
    """The task set of domain ``name``: tau-bench's version and its task modules."""
    spec = importlib.util.find_spec("tau_bench")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'tau_bench'", name="tau_bench")
    folder = Path(next(iter(spec.submodule_search_locations))) / "envs" / name
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
    with _domain_modules(name):
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
