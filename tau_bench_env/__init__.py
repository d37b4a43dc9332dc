"""A SkyRL environment for tau-bench domains with tau-bench's binary episode reward.

Importing the package registers the env with skyrl-gym under the id
``tau_bench_env`` (entry point ``tau_bench_env.episode.env:TauBenchEnv``), and under
``tau_bench`` too while no other env holds that id: SkyRL's own tau-bench env
(SkyRL PR #1853) registers ``tau_bench``, and where it does, ``tau_bench`` is
SkyRL's env and this one is ``tau_bench_env`` (docs/tau_bench_env.md). The ids are
registered when skyrl-gym is imported, now or later
(:func:`skyrl_rewards.gym_registration.when_gym_loads`), and the names below are
loaded on first use (PEP 562): ``tau-bench-env rescore`` never imports skyrl-gym
(0.4 s of pandas), nor the env.
"""

from __future__ import annotations

import importlib
import logging
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from skyrl_rewards.gym_registration import GYM, when_gym_loads

_EXPORTS: dict[str, str] = {
    "Action": "tau_bench_env.data_model.tasks",
    "BackendUnavailableError": "tau_bench_env.backends",
    "Episode": "tau_bench_env.episode.episode",
    "HashIndex": "tau_bench_env.data_model.hashing",
    "OpenAIUser": "tau_bench_env.users.simulators",
    "ParsedTurn": "tau_bench_env.episode.actions",
    "ReplayUser": "tau_bench_env.users.simulators",
    "RewardResult": "tau_bench_env.episode.reward",
    "Task": "tau_bench_env.data_model.tasks",
    "TauBenchEnv": "tau_bench_env.episode.env",
    "TauBenchEnvConfig": "tau_bench_env.config",
    "TauBenchUser": "tau_bench_env.users.simulators",
    "UserConfig": "tau_bench_env.config",
    "UserSimulatorError": "tau_bench_env.users.simulators",
    "data_hash": "tau_bench_env.data_model.hashing",
    "env_config_from": "tau_bench_env.config",
    "installed_backends": "tau_bench_env.backends",
    "load_domain": "tau_bench_env.backends",
    "parse_turn": "tau_bench_env.episode.actions",
    "score_episode": "tau_bench_env.episode.reward",
    "task_from_dict": "tau_bench_env.data_model.tasks",
}
"""Public name -> the module that defines it."""

__all__ = [
    "ALIAS_ID",
    "ENTRY_POINT",
    "ENV_ID",
    "Action",
    "BackendUnavailableError",
    "Episode",
    "HashIndex",
    "OpenAIUser",
    "ParsedTurn",
    "ReplayUser",
    "RewardResult",
    "Task",
    "TauBenchEnv",
    "TauBenchEnvConfig",
    "TauBenchUser",
    "UserConfig",
    "UserSimulatorError",
    "data_hash",
    "env_config_from",
    "installed_backends",
    "load_domain",
    "parse_turn",
    "score_episode",
    "task_from_dict",
]

if TYPE_CHECKING:
    from tau_bench_env.backends import BackendUnavailableError, installed_backends, load_domain
    from tau_bench_env.config import TauBenchEnvConfig, UserConfig, env_config_from
    from tau_bench_env.data_model.hashing import HashIndex, data_hash
    from tau_bench_env.data_model.tasks import Action, Task, task_from_dict
    from tau_bench_env.episode.actions import ParsedTurn, parse_turn
    from tau_bench_env.episode.env import TauBenchEnv
    from tau_bench_env.episode.episode import Episode
    from tau_bench_env.episode.reward import RewardResult, score_episode
    from tau_bench_env.users.simulators import (
        OpenAIUser,
        ReplayUser,
        TauBenchUser,
        UserSimulatorError,
    )

ENV_ID = "tau_bench_env"
ALIAS_ID = "tau_bench"
ENTRY_POINT = "tau_bench_env.episode.env:TauBenchEnv"


def _register(*, deferred: bool) -> None:
    """Register :data:`ENV_ID` and, while free, :data:`ALIAS_ID` with skyrl-gym.

    An id held by another env raises ``EnvIdTakenError`` at ``import tau_bench_env``
    when skyrl-gym was already imported; run inside skyrl-gym's own first import
    (``deferred``), it is a warning instead, and making the env by that id fails later.
    """
    from skyrl_rewards.train.registration import EnvIdTakenError, register_alias, register_env

    try:
        register_env(ENV_ID, ENTRY_POINT)
    except EnvIdTakenError as error:
        if not deferred:
            raise
        logging.getLogger(__name__).warning("%s", error)
    register_alias(ALIAS_ID, ENTRY_POINT)


when_gym_loads(partial(_register, deferred=GYM not in sys.modules))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tau_bench_env' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
