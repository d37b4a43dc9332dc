"""Settings of a :class:`~skyrl_rewards.pool.reward_pool.RewardPool`: a frozen, typed dataclass.

omegaconf lives at the edge only: :func:`load_pool_config` merges the defaults,
a YAML file or mapping, and ``key=value`` overrides (SkyRL style), then
converts once into :class:`PoolConfig`. Everything past that point sees plain,
checked Python values.

>>> cfg = load_pool_config(None, ["num_workers=3", "rewards.format.weight=0.5"])
>>> cfg.num_workers, cfg.rewards["format"]["weight"]
(3, 0.5)
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyrl_rewards.bundled import config_file
from skyrl_rewards.suggest import did_you_mean

PLACEMENTS = ("spread", "default")


@dataclass(frozen=True)
class JudgeLaneConfig:
    """The pool's judge lane: one asynchronous actor that sends every judge request of the pool.

    Judge requests are I/O: the lane holds no CPU worker slot, and its limits
    (in flight, requests and tokens per minute: the judge's endpoint settings)
    hold for the whole pool because every client's requests pass through it.
    """

    num_cpus: float = 0.0
    """Logical CPUs Ray reserves for the lane (0: it takes no CPU slot from the rule workers)."""
    max_concurrency: int = 4096
    """Calls the lane actor serves at once (each carries up to ``batch_size`` requests)."""
    timeout_s: float = 900.0
    """Wall-clock safety net of one call to the lane (the endpoint's own timeouts, retries
    and limit waits come first); past it the call's requests score ``timeout``."""
    max_retries: int = 2
    """Times a request is sent again after the lane actor died (its node lost); then ``error``."""


@dataclass(frozen=True)
class ModelWorkersConfig:
    """The pool's reward-model worker group: actors that load the reward model(s) once."""

    num_workers: int = 1
    """Reward-model worker actors (started only when the mix has a ``reward_model``)."""
    num_cpus_per_worker: float = 1.0
    """Logical CPUs Ray reserves for each reward-model worker."""
    num_gpus_per_worker: float = 0.0
    """GPUs Ray reserves for each reward-model worker (fractional allowed, e.g. 0.5 packs two
    workers on one GPU); 0 runs the model on the CPU."""
    placement: str = "spread"
    """``spread``: workers across nodes (Ray SPREAD); ``default``: Ray decides."""
    batch_size: int = 64
    """Most requests sent to one reward-model worker in one call (the model batches them
    further by its token budget)."""
    timeout_s: float = 300.0
    """Wall-clock limit of one call; past it the worker is killed and replaced and the call's
    requests are sent again (then ``timeout``)."""
    max_retries: int = 2
    """Times a request is sent again after its worker died or hung; then ``error``/``timeout``."""


_SECTIONS = {"judge_lane": JudgeLaneConfig, "model_workers": ModelWorkersConfig}


def _default_rewards() -> dict[str, dict[str, Any]]:
    return {"accuracy": {"weight": 1.0}, "format": {"weight": 0.5}}


@dataclass(frozen=True)
class PoolConfig:
    """Every setting of a reward pool, with its unit in its name."""

    name: str = "skyrl_rewards_pool"
    """Name of the pool's directory actor; ``RewardPool.connect(name)`` finds it."""
    namespace: str = "skyrl_rewards"
    """Ray namespace of the named directory actor."""
    address: str | None = None
    """``None``: use the running Ray, else start a local one on 127.0.0.1;
    ``"auto"`` or ``"host:port"``: join that cluster."""
    num_workers: int = 2
    """Number of worker actors (each a process holding the reward functions)."""
    num_cpus_per_worker: float = 1.0
    """Logical CPUs Ray reserves for each worker."""
    placement: str = "spread"
    """``spread``: workers across nodes (Ray SPREAD); ``default``: Ray decides (packs)."""
    worker_niceness: int | None = 0
    """Steps nicer than the process that starts the pool the workers run (at most 19): 0
    competes evenly with it (a trainer; a driver under ``nice -n 10`` gets workers at 10).
    Ray starts workers 15 steps nicer, so next to a busy trainer the rewards starve. A pool that
    starts its own Ray has Ray start its workers there (niceness is relative: no privileges
    needed). In a running cluster a worker sets that niceness itself; lowering it needs
    privileges (CAP_SYS_NICE): when refused, it logs a warning and keeps Ray's value. ``None``
    keeps Ray's."""
    first_pass_s: float = 0.0
    """0 (the default: a batch's makespan first): no first pass; every math check runs with
    its full limit in the ordinary stream, and an idle worker takes over the tasks queued
    behind a slow one. > 0 (per-item latency first, for streaming: ``score_async``, eval): the
    least CPU time a math check may take in a worker's first pass. The cap is 4x the p99 CPU
    time of the worker's recent checks, between this and 0.5 s (0.1 s on answers whose p99 is
    18 ms; MATH-style answers raise it to 0.3-0.5 s). A task that needs more is scored again
    alone: with a 1 s cap by an idle ordinary lane or the slow lane, then with its full limit
    in the slow lane, after the other items."""
    slow_lane_niceness: int = 19
    """Niceness added to the math children of the slow lane (0 to 19): math checks deferred
    from a first pass then take only CPU time that ordinary items do not want. Their outcome
    does not change (the limit is on their own CPU time); 0 lets them compete evenly."""
    slow_lane_timeout_s: float = 300.0
    """Wall-clock safety net of one slow-lane task; past it the worker is killed and replaced.
    Its math is bounded on CPU time by the reward's ``math_timeout_s``, which a busy machine
    stretches in wall time (the slow lane yields the CPU); this catches any other hang."""
    batch_size: int = 64
    """Most items gathered into one batch and sent to one worker in one call."""
    batch_wait_s: float = 0.005
    """Longest a partial batch waits for more items before it is sent."""
    timeout_s: float = 10.0
    """Time limit of one reward component on one item; past it the worker is killed
    and replaced and the component scores ``fallback`` with status ``timeout``. A worker
    found running a math check then (bounded on CPU time, which a loaded machine stretches
    in wall time) is waited on instead, up to ``slow_lane_timeout_s``."""
    max_retries: int = 2
    """Times an item is scored again after the worker scoring it died; then ``error``."""
    fallback: float = 0.0
    """Value of a component that timed out or errored."""
    max_items_per_worker: int = 20000
    """A worker is replaced (gracefully) after this many reward computations,
    bounding sympy's memory growth; 0 never recycles."""
    progress_interval_s: float = 0.02
    """Workers report finished work at least this often (cheap rewards go in groups)."""
    fence_min_s: float = 0.0005
    """A reward whose mean time on a worker is at least this is reported item by item,
    so that a hang in it is pinned on one item at once (costs ~0.1 ms per item)."""
    start_timeout_s: float = 120.0
    """Longest to wait for a new worker to load its reward functions; also bounds the start
    of a pool (creating or connecting): past it, ``PoolStartError`` says how many workers
    run and how many are pending."""
    queue_timeout_s: float = 300.0
    """Longest a call may wait behind other clients' calls on a shared worker."""
    cache_size: int = 100000
    """Finished work remembered (identical work in later batches is not redone),
    and inputs that timed out remembered (answered as a timeout at once)."""
    alarm_window_items: int = 500
    """Items in the sliding window of the error-rate alarm."""
    alarm_error_rate: float = 0.5
    """Alarm when this fraction of the window's items must be masked (timeout or error)."""
    alarm_min_items: int = 100
    """The alarm stays quiet until the window holds at least this many items."""
    alarm_stop: bool = False
    """When the alarm fires, refuse further scoring (raise ``RewardAlarmError``)."""
    replay_path: str | None = None
    """JSONL file to which timed-out and crashed items are appended; ``None``: off."""
    local_rewards: list[str] = field(default_factory=lambda: ["format", "format_rec"])
    """Rewards scored in the calling process instead of on a worker: they cost microseconds,
    less than shipping them. A mix made only of these never touches Ray when scoring."""
    rewards: Mapping[str, Mapping[str, Any]] = field(default_factory=_default_rewards)
    """Reward mix: registry name -> ``{weight: w, <param>: value, ...}``."""
    judge_lane: JudgeLaneConfig = field(default_factory=JudgeLaneConfig)
    """The judge lane (started only when the mix may ask a judge): see :class:`JudgeLaneConfig`."""
    model_workers: ModelWorkersConfig = field(default_factory=ModelWorkersConfig)
    """The reward-model workers (started only when the mix has a reward model)."""

    def __post_init__(self) -> None:
        for key, section in _SECTIONS.items():
            value = getattr(self, key)
            if isinstance(value, Mapping):
                object.__setattr__(self, key, _section(key, section, value))
        _check_types(self)
        _check_sections(self)
        positive = (
            "num_workers",
            "batch_size",
            "timeout_s",
            "slow_lane_timeout_s",
            "start_timeout_s",
            "queue_timeout_s",
            "alarm_window_items",
            "num_cpus_per_worker",
            "progress_interval_s",
            "fence_min_s",
        )
        for key in positive:
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: must be > 0, got {getattr(self, key)!r}")
        for key in (
            "first_pass_s",
            "batch_wait_s",
            "max_retries",
            "max_items_per_worker",
            "cache_size",
            "alarm_min_items",
        ):
            if getattr(self, key) < 0:
                raise ValueError(f"{key}: must be >= 0, got {getattr(self, key)!r}")
        if not 0 <= self.slow_lane_niceness <= 19:
            raise ValueError(
                f"slow_lane_niceness: must be between 0 and 19, got {self.slow_lane_niceness!r}"
            )
        if not 0.0 < self.alarm_error_rate <= 1.0:
            raise ValueError(f"alarm_error_rate: must be in (0, 1], got {self.alarm_error_rate!r}")
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement: expected one of {PLACEMENTS}, got {self.placement!r}")
        if not self.name:
            raise ValueError("name: must not be empty")
        if not self.rewards:
            raise ValueError("rewards: the reward mix is empty; name at least one reward")
        for reward, entry in self.rewards.items():
            if not isinstance(entry, Mapping):
                raise ValueError(
                    f"rewards.{reward}: expected a mapping {{weight: w, ...}}, got {entry!r}"
                )

    def to_dict(self) -> dict[str, Any]:
        """Plain-dict form (what the directory actor hands to ``connect``)."""
        data = dataclasses.asdict(self)
        data["rewards"] = {k: dict(v) for k, v in self.rewards.items()}
        data["local_rewards"] = list(self.local_rewards)
        return data


STREAMING_FIRST_PASS_S = 0.1
"""``first_pass_s`` of a pool whose results are waited for one by one (SkyRL's fully-async trainer)."""


def for_streaming(config: PoolConfig, overrides: Sequence[str] = ()) -> PoolConfig:
    """``config`` in the latency view (``first_pass_s`` :data:`STREAMING_FIRST_PASS_S`) for a
    consumer that waits for each result on its own, unless ``overrides`` set ``first_pass_s``.

    Under SkyRL's fully-async trainer every group's completion time counts on its own: with
    the makespan view (0) a burst of math hangs holds the workers' ordinary lanes for a math
    limit each and the groups behind them wait (docs/pool.md, "Under SkyRL's fully-async
    trainer"); with a first pass a hang is deferred to the slow lane after its cap and delays
    only its own group.

    >>> for_streaming(PoolConfig()).first_pass_s, for_streaming(PoolConfig(), ["first_pass_s=0"]).first_pass_s
    (0.1, 0.0)
    """
    if any(o.split("=", 1)[0].strip() == "first_pass_s" for o in overrides) or config.first_pass_s:
        return config
    return dataclasses.replace(config, first_pass_s=STREAMING_FIRST_PASS_S)


def load_pool_config(
    source: str | Path | Mapping[str, Any] | PoolConfig | None = None,
    overrides: Sequence[str] = (),
) -> PoolConfig:
    """Defaults <- ``source`` (YAML path, mapping or omegaconf node) <- ``key=value`` overrides.

    A bare name (``rec.yaml``) or ``bundled:rec.yaml`` names a bundled config;
    a path that does not exist is a ``FileNotFoundError``
    (:func:`skyrl_rewards.bundled.config_file`).

    Raises ``ValueError`` naming the key for an unknown key or a wrong type.
    """
    from omegaconf import OmegaConf

    if isinstance(source, PoolConfig):
        source = source.to_dict()
    merged = OmegaConf.create(PoolConfig().to_dict())
    if source is not None:
        loaded = (
            OmegaConf.load(config_file(source))
            if isinstance(source, (str, Path))
            else OmegaConf.create(source if hasattr(source, "_metadata") else dict(source))
        )
        plain = OmegaConf.to_container(loaded, resolve=True)
        if not isinstance(plain, dict):
            raise ValueError(f"pool config: expected a mapping, got {type(plain).__name__}")
        _refuse_unknown_keys(plain)
        if "rewards" in plain:  # a given mix replaces the default mix, it is not merged into it
            merged.rewards = {}
        merged = OmegaConf.merge(merged, loaded)
    if overrides:
        merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(list(overrides)))
    data = OmegaConf.to_container(merged, resolve=True)
    assert isinstance(data, dict)
    _refuse_unknown_keys(data)
    return PoolConfig(**{str(k): v for k, v in data.items()})


def _section(key: str, section: type, value: Mapping[str, Any]) -> Any:
    """Build a nested settings section from a mapping; ``ValueError`` names an unknown key."""
    known = [f.name for f in dataclasses.fields(section)]
    unknown = sorted(str(name) for name in value if name not in known)
    if unknown:
        named = ", ".join(f"{name!r}{did_you_mean(name, known)}" for name in unknown)
        raise ValueError(f"{key}: unknown key{'s' * (len(unknown) > 1)} {named}; known: {known}")
    built = section(**{str(k): v for k, v in value.items()})
    _check_types(built, prefix=f"{key}.")
    return built


def _check_sections(cfg: PoolConfig) -> None:
    """Range checks of the nested sections."""
    lane, workers = cfg.judge_lane, cfg.model_workers
    for name, value in (
        ("judge_lane.max_concurrency", lane.max_concurrency),
        ("judge_lane.timeout_s", lane.timeout_s),
        ("model_workers.num_workers", workers.num_workers),
        ("model_workers.num_cpus_per_worker", workers.num_cpus_per_worker),
        ("model_workers.batch_size", workers.batch_size),
        ("model_workers.timeout_s", workers.timeout_s),
    ):
        if value <= 0:
            raise ValueError(f"{name}: must be > 0, got {value!r}")
    for name, value in (
        ("judge_lane.num_cpus", lane.num_cpus),
        ("judge_lane.max_retries", lane.max_retries),
        ("model_workers.num_gpus_per_worker", workers.num_gpus_per_worker),
        ("model_workers.max_retries", workers.max_retries),
    ):
        if value < 0:
            raise ValueError(f"{name}: must be >= 0, got {value!r}")
    if workers.placement not in PLACEMENTS:
        raise ValueError(
            f"model_workers.placement: expected one of {PLACEMENTS}, got {workers.placement!r}"
        )


def _refuse_unknown_keys(data: Mapping[Any, Any]) -> None:
    """Raise ``ValueError`` naming each key that is not a setting, with the nearest setting."""
    known = [f.name for f in dataclasses.fields(PoolConfig)]
    unknown = sorted(str(key) for key in data if key not in known)
    if unknown:
        named = ", ".join(f"{key!r}{did_you_mean(key, known)}" for key in unknown)
        raise ValueError(f"pool config: unknown key{'s' * (len(unknown) > 1)} {named}")


def _check_types(cfg: Any, prefix: str = "") -> None:
    """Raise ``ValueError`` naming the first field whose value has the wrong type.

    An int is accepted (and converted) where a float is expected; a bool is
    never accepted as a number.
    """
    hints = typing.get_type_hints(type(cfg))
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        expected = hints[f.name]
        allowed = (
            typing.get_args(expected) if isinstance(expected, types.UnionType) else (expected,)
        )
        if value is None and type(None) in allowed:
            continue
        base = next(t for t in allowed if t is not type(None))
        origin = typing.get_origin(base) or base
        if origin is float and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(cfg, f.name, float(value))
            continue
        if isinstance(value, bool) and origin is not bool:
            raise ValueError(f"{prefix}{f.name}: expected {base}, got {value!r}")
        if not isinstance(value, origin):
            raise ValueError(f"{prefix}{f.name}: expected {base}, got {value!r}")
