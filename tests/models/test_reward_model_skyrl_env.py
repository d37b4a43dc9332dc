"""The ``skyrl_rewards`` SkyRL env with a served reward model in its mix, through ``skyrl_gym.make`` and a real pool.

The reward model is vLLM's ``/classify`` on loopback (:mod:`reward_model_server`).
A step pays the server's value, normalised; a step whose request fails (HTTP
500 for that input) is a masked trajectory: ``metadata['should_mask']`` and
``get_metrics()`` say so, as for the judge (tests/models/test_judge_skyrl_env.py).
The vision-language reward model's env test is in
tests/skyrl_trainer/test_vl_reward_model.py (its processor needs ``.venv-skyrl``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import skyrl_gym
from reward_model_server import Response, RewardModelServer, conversation_text, expected_score

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.train.env import close_shared_pools

pytestmark = pytest.mark.slow

QUESTION = "What animal is on the mat?"


def test_a_served_reward_model_pays_the_step_and_a_failed_request_masks_it(
    ray_local: None,
) -> None:
    def plan(number: int, body: dict[str, Any]) -> Response | None:
        return Response(500) if "a dog" in json.dumps(body) else None

    with RewardModelServer(plan=plan) as server:
        reward_model = {
            "weight": 1.0,
            "base_url": server.base_url,
            "model": "rm",
            "input": "messages",
            "retries": {"max_retries": 0},
            "normalize": {"affine": {"scale": 2.0, "shift": -1.0}},
        }
        pool = RewardPool.from_config(
            {"name": "t_env_rm", "num_workers": 1, "rewards": {"reward_model": reward_model}}
        )
        steps = []
        try:
            extras = {
                "reward_spec": {"method": "rule", "ground_truth": "x"},
                "max_turns": 1,
                "problem": QUESTION,
            }
            for answer in ("a cat", "a dog"):
                env = skyrl_gym.make(
                    "skyrl_rewards", env_config={"pool": "t_env_rm"}, extras=extras
                )
                env.init([{"role": "user", "content": QUESTION}])
                steps.append((env.step(answer), env.get_metrics()))
        finally:
            close_shared_pools()
            pool.shutdown()
    (paid, paid_metrics), (failed, failed_metrics) = steps
    chat = [{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "a cat"}]
    probability = expected_score(conversation_text(chat))
    assert paid["reward"] == pytest.approx(2.0 * probability - 1.0, abs=1e-9)
    assert not paid["metadata"]["should_mask"] and paid_metrics["should_mask"] == 0
    assert server.errors >= 1  # the failure happened at the server
    assert failed["metadata"]["should_mask"] and failed["reward"] == 0.0
    assert failed["metadata"]["status"]["reward_model"] == "error"
    assert "500" in failed["metadata"]["errors"]["reward_model"]
    assert failed_metrics["should_mask"] == 1
