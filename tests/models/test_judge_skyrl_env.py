"""The ``skyrl_rewards`` SkyRL env with a judge in its mix, through ``skyrl_gym.make`` and a real pool.

A judge that cannot answer (the loopback endpoint is down) gives the step a
masked result: ``metadata['should_mask']`` and ``get_metrics()`` say so, and the
generator turns that into an all-zero loss mask (tests/skyrl_trainer).
"""

from __future__ import annotations

import pytest
import skyrl_gym
from judge_server import JudgeServer

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.train.env import close_shared_pools

pytestmark = pytest.mark.slow


def test_a_judged_step_pays_the_verdict_and_an_outage_masks_the_step(ray_local: None) -> None:
    with JudgeServer(reply=lambda body: "0.8" if "cat" in str(body) else "0.1") as server:
        judge = {
            "weight": 1.0,
            "base_url": server.url,
            "model": "judge",
            "template": "Grade 0-1: {answer}",
            "parser": {"kind": "scale", "lo": 0, "hi": 1},
            "max_retries": 0,
        }
        pool = RewardPool.from_config(
            {"name": "t_env_judge", "num_workers": 1, "rewards": {"judge": judge}}
        )
        try:
            extras = {"reward_spec": {"method": "rule", "ground_truth": "x"}, "max_turns": 1}
            env = skyrl_gym.make("skyrl_rewards", env_config={"pool": "t_env_judge"}, extras=extras)
            env.init([{"role": "user", "content": "What animal?"}])
            judged = env.step("<answer>a cat</answer>")
            server.down = True
            env = skyrl_gym.make("skyrl_rewards", env_config={"pool": "t_env_judge"}, extras=extras)
            env.init([{"role": "user", "content": "What animal?"}])
            failed = env.step("<answer>a dog</answer>")
            metrics = env.get_metrics()
        finally:
            close_shared_pools()
            pool.shutdown()
    assert judged["reward"] == pytest.approx(0.8) and not judged["metadata"]["should_mask"]
    assert failed["metadata"]["should_mask"] and failed["reward"] == 0.0
    assert failed["metadata"]["status"]["judge"] == "error"
    assert metrics["should_mask"] == 1
