"""The env's typed configuration: :class:`TauBenchEnvConfig`, :class:`UserConfig`, :func:`env_config_from`.

The classes and the defaults they share with the env's modules live in
``skyrl_rewards.train.tau_bench_config`` (SkyRL's ``TrainConfig`` needs them,
and ``skyrl_rewards`` never imports ``tau_bench_env``); this module re-exports
them, so ``from tau_bench_env.config import TauBenchEnvConfig`` is the
env's own way to reach them. It imports no other module of ``tau_bench_env``.
"""

from skyrl_rewards.train.tau_bench_config import (
    BACKEND_NAMES,
    DEFAULT_MAX_CHARS,
    DEFAULT_MAX_TOOL_CALLS,
    DEFAULT_TOOL_TIMEOUT_S,
    OBSERVATION_ROLES,
    OFFICIAL_TAU2_BACKENDS,
    REWARD_KINDS,
    USER_KINDS,
    TauBenchEnvConfig,
    UserConfig,
    env_config_from,
)

__all__ = [
    "BACKEND_NAMES",
    "DEFAULT_MAX_CHARS",
    "DEFAULT_MAX_TOOL_CALLS",
    "DEFAULT_TOOL_TIMEOUT_S",
    "OBSERVATION_ROLES",
    "OFFICIAL_TAU2_BACKENDS",
    "REWARD_KINDS",
    "USER_KINDS",
    "TauBenchEnvConfig",
    "UserConfig",
    "env_config_from",
]
