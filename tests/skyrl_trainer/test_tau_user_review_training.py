"""``review_user`` in training: SkyRL's own generator path masks the episodes whose user
simulator the judge (a real loopback chat endpoint, scripted verdicts) finds at fault."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from skyrl_helpers import ScriptedEngine
from test_skyrl_training_path import dataset_batch, last_token_rewards, tau_cfg, tau_parquet

from skyrl_rewards.train.generator import make_generator
from skyrl_rewards.train.registration import register_installed_envs

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from judge_server import JudgeServer  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _envs_registered() -> None:
    assert "tau_bench_env" in register_installed_envs()


def test_an_episode_the_simulator_broke_is_masked_and_the_agents_failure_trained_on(
    tokenizer: Any, tmp_path: Path
) -> None:
    parquet, tasks = tau_parquet(tmp_path, 2)
    batch = dataset_batch([parquet], tokenizer, "tau_bench_env")
    replies = {f"{i}_0": ["Goodbye."] for i in range(len(tasks))}  # both fail: no write made

    def verdict(body: dict[str, Any]) -> str:
        at_fault = tasks[0].instruction in str(body["messages"][-1]["content"])
        category = "ended_early" if at_fault else "none"
        return json.dumps({"at_fault": at_fault, "category": category, "reason": "scripted"})

    with JudgeServer(reply=verdict) as judge:
        cfg = tau_cfg(
            "environment.skyrl_gym.tau_bench_env.user.kind=replay",
            "environment.skyrl_gym.tau_bench_env.review_user=true",
            f"environment.skyrl_gym.tau_bench_env.judge={{base_url: '{judge.url}', model: j}}",
        )
        generator = make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer)
        out = asyncio.run(generator.generate(batch, disable_tqdm=True))
        assert judge.calls == 2  # each failed episode was reviewed
    assert last_token_rewards(out) == [0.0, 0.0]
    masked = [not any(mask) for mask in out["loss_masks"]]
    assert masked == [True, False]  # task 0: the simulator's fault; task 1: the agent's, trained on
    metrics = out["rollout_metrics"]
    assert metrics["generate/masked_share"] == 0.5
    assert metrics["environment/user_at_fault"] == 0.5
    assert metrics["environment/user_reviewed"] == 1.0
    assert metrics["environment/user_review_failed"] == 0.0
