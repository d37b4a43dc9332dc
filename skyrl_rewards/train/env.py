"""The single-turn SkyRL environment that pays the reward mix: ``skyrl_rewards``.

SkyRL's generator makes one env per trajectory,
``skyrl_gym.make("skyrl_rewards", env_config=cfg.environment.skyrl_gym.skyrl_rewards,
extras=row)``, and calls :meth:`SkyRLRewardEnv.step` once with the model's
text, from a thread pool. ``step`` scores that text against the row's ground
truth and returns the weighted reward with ``done=True``.

``env_config`` (dict, omegaconf node or :class:`RewardEnvConfig`):

- ``pool``: name of a running reward pool (``skyrl-rewards pool start``);
  default: the default pool name of :class:`PoolConfig`. The env connects once
  per process and every ``step`` goes through it; the pool gathers concurrent
  ``step`` calls into micro-batches before they cross to Ray. In this mode the
  pool's own reward mix is used; a ``rewards`` mapping given too must equal
  it (a guard against training on a different mix than the config says).
- ``in_process``: score in this process with a :class:`RewardMix` built from
  ``rewards`` (for debugging, tests and small runs; no Ray needed).
- ``rewards``: ``{name: {weight, **params}}``, as in ``configs/*.yaml``.
- ``wait_timeout_s``: the longest a ``step`` waits for its reward from the pool
  (default 3600). The pool's own limits (``timeout_s``, retries, the slow lane's
  net, the model lanes' timeouts) answer every item long before; past this the
  pool is broken, and ``step`` raises ``TimeoutError`` naming it (the masking
  generator then masks that trajectory alone).

``extras`` (one dataset row, as SkyRL passes it):

- ``reward_spec.ground_truth``: the solution (required).
- every other top-level column (``image_path``, ``image_grid_thw``,
  ``accu_reward_method``, ...) is handed to the rewards as is, except the
  SkyRL bookkeeping keys ``reward_spec`` and ``max_turns`` and columns that
  are null in this row (a parquet file with mixed tasks fills a column that
  a row lacks with null).
- the prompt: SkyRL passes it to :meth:`SkyRLRewardEnv.init`, not in
  ``extras``; a row without a ``prompt`` column gets that chat as its
  ``prompt``, text parts only (what a reward model or a judge's
  ``{question}`` reads; the images stay in ``image_path``), so those rewards
  see the prompt the policy answered.

The step ``metadata`` is :meth:`RewardResult.to_dict`: ``total``, each
component's value, status and error, ``latency_s``, ``should_mask`` (a
component timed out or hit a dataset error: mask the sample rather than train
on its fallback value) and ``clamped`` (per component, the answer's boxes past
their relative grid, scored clamped: a Qwen3-VL coordinate past 1000).

Importing this module registers the env with skyrl-gym under the id
``skyrl_rewards``; the package also declares it in the ``skyrl_gym.envs``
entry-point group, which
:func:`~skyrl_rewards.train.registration.register_installed_envs` reads (with
the ``tau_bench`` env of the same package and any other installed env). An id
already held by a different env is an error, never silently replaced.
"""

import concurrent.futures
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from skyrl_rewards.gym_registration import ENTRY_POINT, ENV_ID
from skyrl_rewards.pool.config import PoolConfig
from skyrl_rewards.rewards.contract.result import RewardResult
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.train.registration import register_env

if TYPE_CHECKING:
    from skyrl_rewards.pool.reward_pool import RewardPool

SKYRL_BOOKKEEPING_KEYS = frozenset({"reward_spec", "max_turns"})
MASK_METRIC = "should_mask"
"""The ``get_metrics()`` key, in every env of this project, that is 1.0 for an episode whose
reward is a fallback; :mod:`skyrl_rewards.train.generator` zeroes that trajectory's loss mask."""


@dataclass(frozen=True)
class RewardEnvConfig:
    """Settings of :class:`SkyRLRewardEnv` (the ``env_config`` SkyRL passes)."""

    pool: str = PoolConfig.name
    """Name of a running reward pool; every step is scored through it."""
    in_process: bool = False
    """Score in this process with ``rewards`` instead of a pool."""
    rewards: Mapping[str, Any] = field(default_factory=dict)
    """Reward mix ``{name: {weight, **params}}``; required when ``in_process``."""
    wait_timeout_s: float = 3600.0
    """Longest a ``step`` waits for its reward from the pool (a net: the pool's limits come first)."""

    def __post_init__(self) -> None:
        if not self.wait_timeout_s > 0:
            raise ValueError(
                f"env_config.wait_timeout_s: must be > 0 seconds, got {self.wait_timeout_s!r}"
            )
        if self.in_process and not self.rewards:
            raise ValueError(
                "env_config.rewards: in_process=true needs a reward mix {name: {weight, ...}}"
            )
        if not self.in_process and not self.pool:
            raise ValueError(
                "env_config.pool: must name the running reward pool (skyrl-rewards pool start)"
            )

    @classmethod
    def from_any(cls, env_config: Any) -> "RewardEnvConfig":
        """Build from ``None``, a dict, an omegaconf node or an instance."""
        if isinstance(env_config, cls):
            return env_config
        if env_config is None:
            return cls()
        if hasattr(env_config, "_metadata"):  # an omegaconf node
            from omegaconf import OmegaConf

            env_config = OmegaConf.to_container(env_config, resolve=True)
        if not isinstance(env_config, Mapping):
            raise ValueError(f"env_config: expected a mapping, got {type(env_config).__name__}")
        unknown = set(env_config) - {"pool", "in_process", "rewards", "wait_timeout_s"}
        if unknown:
            raise ValueError(
                f"env_config: unknown keys {sorted(unknown)}; expected pool, in_process, "
                "rewards, wait_timeout_s"
            )
        pool = env_config.get("pool")
        in_process = env_config.get("in_process", False)
        if not isinstance(in_process, bool):
            raise ValueError(f"env_config.in_process: expected true or false, got {in_process!r}")
        wait_timeout_s = env_config.get("wait_timeout_s", cls.wait_timeout_s)
        if isinstance(wait_timeout_s, bool) or not isinstance(wait_timeout_s, (int, float)):
            raise ValueError(
                f"env_config.wait_timeout_s: expected seconds (a number), got {wait_timeout_s!r}"
            )
        return cls(
            pool=PoolConfig.name if pool is None else str(pool),
            in_process=in_process,
            rewards=dict(env_config.get("rewards") or {}),
            wait_timeout_s=float(wait_timeout_s),
        )


_lock = threading.Lock()
_pools: dict[str, "RewardPool"] = {}
_mixes: dict[str, RewardMix] = {}


def shared_pool(name: str) -> "RewardPool":
    """The process-wide client of the pool ``name`` that every env of this process uses.

    Connected on first use; its ``metrics()`` count the steps of this process.
    """
    from skyrl_rewards.pool.reward_pool import RewardPool

    with _lock:
        if name not in _pools:
            try:
                _pools[name] = RewardPool.connect(name)
            except ValueError as e:
                raise ValueError(
                    f"env_config.pool: no reward pool {name!r} is reachable ({e}); start it with "
                    f"`skyrl-rewards pool start --config CFG name={name}` or set in_process=true"
                ) from e
        return _pools[name]


def close_shared_pools() -> None:
    """Close this process's pool clients (the pools themselves keep running)."""
    with _lock:
        clients = list(_pools.values())
        _pools.clear()
    for client in clients:
        client.shutdown()


def _check_pool_mix(name: str, rewards: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` when the running pool ``name`` scores a different mix than ``rewards``."""
    expected = {k: dict(v or {}) for k, v in rewards.items()}
    actual = {k: dict(v) for k, v in shared_pool(name).config.rewards.items()}
    if _normalized(expected) != _normalized(actual):
        raise ValueError(
            f"env_config.rewards: {expected} differs from the mix of pool {name!r}: {actual}; "
            "drop env_config.rewards or restart the pool with this mix"
        )


def _normalized(rewards: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: {"weight": 1.0, **entry} for name, entry in rewards.items()}


def _shared_mix(rewards: Mapping[str, Any]) -> RewardMix:
    """The process-wide mix for this rewards mapping (built once: it may load a tokenizer)."""
    key = json.dumps(rewards, sort_keys=True, default=str)
    with _lock:
        if key not in _mixes:
            _mixes[key] = RewardMix.from_config(rewards)
        return _mixes[key]


def _text_parts(message: Any) -> Any:
    """``message`` with a list content reduced to its text parts (no image bytes cross Ray)."""
    if not isinstance(message, Mapping) or not isinstance(message.get("content"), list):
        return message
    texts = [p for p in message["content"] if isinstance(p, Mapping) and p.get("type") == "text"]
    return {**message, "content": texts}


class SkyRLRewardEnv(BaseTextEnv):
    """One scored answer per episode: ``step(text)`` returns the mix's weighted reward, ``done=True``.

    >>> env = SkyRLRewardEnv(
    ...     env_config={"in_process": True, "rewards": {"format": {"weight": 1.0}}},
    ...     extras={"reward_spec": {"ground_truth": "<answer>1</answer>"}},
    ... )
    >>> env.step("<think>so</think><answer>1</answer>")["reward"]
    1.0
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.config = RewardEnvConfig.from_any(env_config)
        extras = dict(extras or {})
        reward_spec = extras.get("reward_spec")
        if not isinstance(reward_spec, Mapping) or "ground_truth" not in reward_spec:
            raise ValueError(
                "extras.reward_spec.ground_truth: missing; SkyRL rows carry "
                "reward_spec: {method: rule, ground_truth: <solution>}"
            )
        self.ground_truth = reward_spec["ground_truth"]
        if not self.config.in_process and self.config.rewards:
            _check_pool_mix(self.config.pool, self.config.rewards)
        self.columns = {
            k: v for k, v in extras.items() if k not in SKYRL_BOOKKEEPING_KEYS and v is not None
        }
        self.result: RewardResult | None = None

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        """Keep the prompt (text parts only) as the row's ``prompt`` when it has none."""
        if "prompt" not in self.columns and isinstance(prompt, list) and prompt:
            self.columns["prompt"] = [_text_parts(message) for message in prompt]
        return super().init(prompt)

    def sample(self, action: str) -> dict[str, Any]:
        """The sample the rewards see for ``action``: the row's columns, completion and solution."""
        return {**self.columns, "completion": action, "solution": self.ground_truth}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Score ``action``; reward is the weighted total, ``metadata`` the full result."""
        self.turns += 1
        sample = self.sample(action)
        if self.config.in_process:
            result = _shared_mix(self.config.rewards).score(sample)
        else:
            result = self._score_in_pool(sample)
        self.result = result
        return BaseTextEnvStepOutput(
            observations=[], reward=result.total, done=True, metadata=result.to_dict()
        )

    def _score_in_pool(self, sample: dict[str, Any]) -> RewardResult:
        """The pool's result for ``sample``, waited for at most ``wait_timeout_s``."""
        try:
            return shared_pool(self.config.pool).score(
                [sample], wait_timeout_s=self.config.wait_timeout_s
            )[0]
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"env_config.wait_timeout_s: no reward from pool {self.config.pool!r} within "
                f"{self.config.wait_timeout_s:g}s, though its own limits should have answered "
                "long before; see `skyrl-rewards pool status` and the pool's log. This "
                "trajectory is masked (environment.skyrl_gym.on_env_error=mask)"
            ) from None

    def get_metrics(self) -> dict[str, Any]:
        """Per-episode numbers: ``reward/<component>``, ``should_mask`` (1.0 when the result is a fallback),
        ``reward/latency_s`` and ``clamped_boxes`` (the answer's boxes past their relative grid,
        scored clamped: :attr:`RewardResult.clamped` summed over components)."""
        if self.result is None:
            return {}
        metrics: dict[str, Any] = {
            f"reward/{name}": value for name, value in self.result.components.items()
        }
        metrics[MASK_METRIC] = float(self.result.should_mask)
        metrics["reward/latency_s"] = self.result.latency_s
        metrics["clamped_boxes"] = float(sum(self.result.clamped.values()))
        return metrics


register_env(ENV_ID, ENTRY_POINT)
