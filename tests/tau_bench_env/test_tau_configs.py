"""The shipped omegaconf configs load into TauBenchEnvConfig, with overrides."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

import skyrl_rewards.train.tau_bench_config as owned
import tau_bench_env.config
from tau_bench_env.backends import BACKENDS
from tau_bench_env.config import BACKEND_NAMES, TauBenchEnvConfig, env_config_from

CONFIGS = sorted((Path(__file__).parents[2] / "configs").glob("tau_bench*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_config_loads(path: Path) -> None:
    config = env_config_from(OmegaConf.load(path))
    assert isinstance(config, TauBenchEnvConfig)


def test_config_names_a_backend_the_registry_has() -> None:
    # the config (owned by skyrl_rewards) validates names; the registry maps them to modules
    assert sorted(BACKEND_NAMES) == sorted(BACKENDS)


def test_env_config_module_reexports_the_owned_section() -> None:
    for name in tau_bench_env.config.__all__:
        assert getattr(tau_bench_env.config, name) is getattr(owned, name)


def test_default_config_matches_dataclass_defaults() -> None:
    path = next(p for p in CONFIGS if p.name == "tau_bench.yaml")
    assert env_config_from(OmegaConf.load(path)) == TauBenchEnvConfig()


def test_key_value_overrides_merge() -> None:
    path = next(p for p in CONFIGS if p.name == "tau_bench.yaml")
    merged = OmegaConf.merge(
        OmegaConf.load(path), OmegaConf.from_dotlist(["max_turns=12", "user.kind=replay"])
    )
    config = env_config_from(merged)
    assert config.max_turns == 12 and config.user.kind == "replay"
