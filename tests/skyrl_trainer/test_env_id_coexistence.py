"""This project's tau-bench env next to SkyRL's own (SkyRL PR #1853: id and config field ``tau_bench``).

Each case runs in a fresh interpreter, so the skyrl-gym registry and SkyRL's config class
are as the case sets them up before anything of this project is imported.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# SkyRL's own tau-bench env, as far as this project can see it: another class holding the id
SKYRL_HOLDS_TAU_BENCH = """
import skyrl_gym
skyrl_gym.register(id="tau_bench", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
"""

# SkyRL's SkyRLGymConfig with a tau_bench field of its own type (before TrainConfig is built)
SKYRL_CONFIG_HAS_TAU_BENCH = """
from dataclasses import dataclass, field
import skyrl.train.config as skyrl_config

@dataclass
class SkyRLTauBenchEnvConfig:
    user_sim_url: str = "http://127.0.0.1:8000/v1"

@dataclass
class SkyRLGymConfigWithTauBench(skyrl_config.SkyRLGymConfig):
    tau_bench: SkyRLTauBenchEnvConfig = field(default_factory=SkyRLTauBenchEnvConfig)

skyrl_config.SkyRLGymConfig = SkyRLGymConfigWithTauBench
"""


def run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout


def test_a_held_tau_bench_id_stays_skyrls_and_ours_is_tau_bench_env() -> None:
    run(
        SKYRL_HOLDS_TAU_BENCH
        + """
import tau_bench_env  # registers tau_bench_env; leaves tau_bench alone, no error
from skyrl_gym.envs.registration import registry
from skyrl_rewards.train.registration import register_installed_envs

assert registry["tau_bench"].entry_point.endswith("GSM8kEnv")
assert registry["tau_bench_env"].entry_point == "tau_bench_env.episode.env:TauBenchEnv"
ids = register_installed_envs()  # SkyRL's entrypoint task: no EnvIdTakenError either
assert "tau_bench_env" in ids and "skyrl_rewards" in ids and "tau_bench" not in ids, ids
assert registry["tau_bench"].entry_point.endswith("GSM8kEnv")
env = skyrl_gym.make(
    "tau_bench_env",
    env_config={"backend": "tau2", "user": {"kind": "replay"}},
    extras={"domain": "retail", "split": "test", "task_index": 0, "user_turns": ["hi"]},
)
assert type(env).__name__ == "TauBenchEnv"
"""
    )


def test_a_free_tau_bench_id_is_this_projects_alias() -> None:
    run(
        """
import tau_bench_env
from skyrl_gym.envs.registration import registry
from skyrl_rewards.train.registration import register_installed_envs

assert registry["tau_bench"].entry_point == registry["tau_bench_env"].entry_point
assert {"tau_bench_env", "tau_bench"} <= set(register_installed_envs())
"""
    )


def test_skyrls_tau_bench_config_section_is_left_to_skyrl() -> None:
    out = run(
        SKYRL_CONFIG_HAS_TAU_BENCH
        + """
from skyrl_rewards.train.config import SKYRL_HAS_TAU_BENCH, TrainConfig
from tau_bench_env.config import TauBenchEnvConfig

assert SKYRL_HAS_TAU_BENCH
cfg = TrainConfig.from_cli_overrides([
    "environment.env_class=tau_bench_env",
    "environment.skyrl_gym.tau_bench_env.user.kind=replay",
    "environment.skyrl_gym.tau_bench.user_sim_url=http://sim:9/v1",
])
gym = cfg.environment.skyrl_gym
assert isinstance(gym.tau_bench_env, TauBenchEnvConfig) and gym.tau_bench_env.user.kind == "replay"
assert type(gym.tau_bench).__name__ == "SkyRLTauBenchEnvConfig"
assert gym.tau_bench.user_sim_url == "http://sim:9/v1"
print("ok")
"""
    )
    assert out.strip().endswith("ok")


def test_without_skyrls_section_tau_bench_is_this_projects_alias_section() -> None:
    run(
        """
from skyrl_rewards.train.config import SKYRL_HAS_TAU_BENCH, TrainConfig
from tau_bench_env.config import TauBenchEnvConfig

assert not SKYRL_HAS_TAU_BENCH
cfg = TrainConfig.from_cli_overrides(["environment.skyrl_gym.tau_bench.user.kind=replay"])
assert isinstance(cfg.environment.skyrl_gym.tau_bench, TauBenchEnvConfig)
assert cfg.environment.skyrl_gym.tau_bench.user.kind == "replay"
"""
    )
