"""A served multimodal reward model inside SkyRL's own VLM generator path.

SkyRL's generator (``vision_language_generator``) runs the ``skyrl_rewards`` env
over REC rows with images; the env scores through a real reward pool whose mix
is a served reward model (a loopback server in vLLM's ``/classify`` shapes,
``images: true``). The rows' images reach the server as chat image parts, the
rewards are the server's values, and a row the server answers 500 is masked all
the way to the loss, never trained on as 0.0.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from skyrl_helpers import ScriptedEngine
from test_skyrl_training_path import COMMON, dataset_batch, last_token_rewards, rec_rows

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.train.config import TrainConfig
from skyrl_rewards.train.dataset import prepare_data
from skyrl_rewards.train.env import close_shared_pools
from skyrl_rewards.train.generator import make_generator

sys.path.insert(0, str(Path(__file__).parents[1] / "models"))
from loopback_server import Response  # noqa: E402
from reward_model_server import (  # noqa: E402
    MODEL,
    RewardModelServer,
    conversation_text,
    expected_score,
)

FAILING_ROW = 2
"""The row whose requests the server answers 500."""


def test_a_served_vl_reward_model_scores_and_masks_inside_skyrls_vlm_generator(
    ray_local: None, tokenizer: Any, tmp_path: Path
) -> None:
    rows = rec_rows(tmp_path)[:3]
    (tmp_path / "rec.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8"
    )
    train, val = prepare_data(tmp_path / "rec.jsonl", tmp_path / "data", "skyrl_rewards")
    batch = dataset_batch([train, val], tokenizer, "skyrl_rewards")
    replies = {
        f"{i}_0": [f"<think>row {i}</think> <answer>[1, 2, 3, 4]</answer>"] for i in range(3)
    }
    failing_text = replies[f"{FAILING_ROW}_0"][0]

    def plan(_: int, body: dict[str, Any]) -> Response | None:
        return Response(status=500) if failing_text in str(body["messages"]) else None

    with RewardModelServer(plan=plan) as server:
        rewards_config = {
            "reward_model": {
                "weight": 1.0,
                "endpoint": {"base_url": server.base_url, "model": MODEL, "input": "messages"},
                "images": True,
            }
        }
        name = "skyrl_trainer_served_rm_pool"
        pool = RewardPool.from_config(
            {"rewards": rewards_config}, [f"name={name}", "num_workers=1"]
        )
        try:
            cfg = TrainConfig.from_cli_overrides(
                [
                    *COMMON,
                    "generator.vision_language_generator=true",
                    "generator.use_conversation_multi_turn=true",
                    "generator.max_turns=1",
                    "environment.env_class=skyrl_rewards",
                    f"environment.skyrl_gym.skyrl_rewards.pool={name}",
                ]
            )
            generator = make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer)
            out = asyncio.run(generator.generate(batch, disable_tqdm=True))
        finally:
            close_shared_pools()
            pool.shutdown()
        assert server.errors >= 1  # the fault happened: the failing row was answered 500
        bodies = {
            body["messages"][-1]["content"]: body["messages"]
            for body in server.bodies
            if "messages" in body
        }
    rewards = last_token_rewards(out)
    for i in range(2):
        messages = bodies[replies[f"{i}_0"][0]]
        user = messages[0]["content"]
        # the prompt the policy answered (SkyRL passes it to init), and the row's own image
        assert [part["type"] for part in user] == ["image_url", "text"]
        assert rows[i]["problem"] in user[1]["text"]
        assert "First output the thinking process" in user[1]["text"]
        expected = expected_score(conversation_text(messages))
        assert 0.0 < expected < 1.0  # the server's probability, not a floor
        assert rewards[i] == pytest.approx(expected, abs=1e-6)
        assert any(out["loss_masks"][i])  # judged: trained on
    assert out["loss_masks"][FAILING_ROW] == [0] * len(out["loss_masks"][FAILING_ROW])
    assert rewards[FAILING_ROW] == 0.0 and out["env_metrics"][FAILING_ROW]["should_mask"] == 1.0
