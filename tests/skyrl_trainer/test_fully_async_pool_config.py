"""The pool the entry point starts for SkyRL's fully-async trainer takes the latency view."""

from __future__ import annotations

import pytest

from skyrl_rewards.pool.config import STREAMING_FIRST_PASS_S
from skyrl_rewards.train.config import TrainConfig
from skyrl_rewards.train.entrypoint import reward_pool_config

BASE = [
    "trainer.logger=console",
    "generator.batched=false",
    "environment.env_class=skyrl_rewards",
    "reward_pool.config=configs/pool.yaml",
]


@pytest.mark.parametrize(
    ("extra", "first_pass_s"),
    [
        ([], 0.0),  # synchronous: a step waits for its whole batch (makespan view, the default)
        (["trainer.fully_async.enabled=true"], STREAMING_FIRST_PASS_S),  # each group on its own
        (["trainer.fully_async.enabled=true", "reward_pool.overrides=[first_pass_s=0]"], 0.0),
        (["trainer.fully_async.enabled=true", "reward_pool.overrides=[first_pass_s=0.25]"], 0.25),
    ],
)
def test_fully_async_runs_start_the_pool_in_the_latency_view(extra, first_pass_s) -> None:
    cfg = TrainConfig.from_cli_overrides([*BASE, *extra])
    assert reward_pool_config(cfg).first_pass_s == first_pass_s
