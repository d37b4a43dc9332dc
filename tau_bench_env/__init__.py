"""A SkyRL environment for tau-bench domains with tau-bench's binary episode reward.

Importing the package registers the env with skyrl-gym under the id
``tau_bench_env`` (entry point ``tau_bench_env.episode.env:TauBenchEnv``), and under
``tau_bench`` too while no other env holds that id: SkyRL's own tau-bench env
(SkyRL PR #1853) registers ``tau_bench``, and where it does, ``tau_bench`` is
SkyRL's env and this one is ``tau_bench_env`` (docs/tau_bench_env.md).
"""

from skyrl_rewards.train.registration import register_alias, register_env
from tau_bench_env.backends import BackendUnavailableError, installed_backends, load_domain
from tau_bench_env.config import TauBenchEnvConfig, UserConfig, env_config_from
from tau_bench_env.data_model.hashing import HashIndex, data_hash
from tau_bench_env.data_model.tasks import Action, Task, task_from_dict
from tau_bench_env.episode.actions import ParsedTurn, parse_turn
from tau_bench_env.episode.env import TauBenchEnv
from tau_bench_env.episode.episode import Episode
from tau_bench_env.episode.reward import RewardResult, score_episode
from tau_bench_env.users.simulators import OpenAIUser, ReplayUser, TauBenchUser, UserSimulatorError

__all__ = [
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

ENV_ID = "tau_bench_env"
ALIAS_ID = "tau_bench"
ENTRY_POINT = "tau_bench_env.episode.env:TauBenchEnv"
register_env(ENV_ID, ENTRY_POINT)
register_alias(ALIAS_ID, ENTRY_POINT)
