"""A vision-language reward model (Qwen2.5-VL sequence classifier): local runner, pool, TRL, SkyRL env.

The model is tiny and random, built and saved by the test (no download), with
a real ``Qwen2_5_VLProcessor`` (:mod:`tiny_vl_reward_model`). Checked:

- rows with different images (sizes, counts, none) scored in one padded batch
  (their images through the fast, torchvision image processor in one call, the vision
  tower's windows packed into a few attention calls) equal an unpadded forward
  of transformers' own Qwen2.5-VL base model through the checkpoint's
  processor, to 1e-5, in this process, one row a pass (``batch_invariant``)
  and in a pool's reward-model workers; a row whose image cannot be read is
  masked with its cause while the others score;
- in bfloat16 a row's value moves with its batch by more than 1e-3 on the fast
  path, and equals its single forward with ``batch_invariant`` (the test
  fails without the setting);
- through the ``skyrl_rewards`` SkyRL env a step pays the model's value, and a
  step whose image cannot be read is a masked trajectory (``should_mask``, as
  for the judge's failures);
- inside TRL's ``GRPOTrainer`` the rows' ``image_path`` column reaches the
  reward and the logged rewards are the model's values;
- a truncation setting the model cannot honour fails the load with the fix.

These run in ``.venv-skyrl``: the Qwen2.5-VL processor needs torchvision.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import skyrl_gym
from PIL import Image
from tiny_vl_reward_model import direct_value, save_vl_model

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.contract.lanes import REWARD_MODEL_LANE, ModelRequest
from skyrl_rewards.rewards.models.reward_model import RewardModelConfig
from skyrl_rewards.rewards.models.reward_model_component import RewardModel
from skyrl_rewards.rewards.models.reward_model_runners import build_runner
from skyrl_rewards.rewards.models.vl_runner import VisionRewardModelRunner
from skyrl_rewards.train.env import close_shared_pools

sys.path.insert(0, str(Path(__file__).parents[1]))  # trl_helpers, shared with tests/test_trl.py
SIZES = [(56, 56), (120, 40), (30, 90), (64, 200)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_vl_model(tmp_path_factory.mktemp("vl_rm"))


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("vl_rm_images")
    paths = []
    for index, size in enumerate(SIZES):
        path = folder / f"image{index}.png"
        picture = Image.effect_mandelbrot(size, (-2.0, -1.5, 1.0, 1.5), 40 + 30 * index)
        picture.convert("RGB").save(path)
        paths.append(str(path))
    broken = folder / "broken.png"
    broken.write_text("not an image")
    paths.append(str(broken))
    return paths


def rows(images: list[str]) -> list[dict[str, Any]]:
    """Rows with one image each (four sizes), two images, none, and an unreadable one (last)."""
    made = [
        {
            "problem": f"where is the cat in picture {index} ?",
            "completion": "the cat sits on a mat " * (1 + index),
            "image_path": path,
        }
        for index, path in enumerate(images[:4])
    ]
    made.append({"problem": "which is larger ?", "completion": "the sun", "images": images[:2]})
    made.append({"problem": "where is the cat ?", "completion": "in the park"})
    made.append({"problem": "and here ?", "completion": "on a mat", "image_path": images[4]})
    return made


def expected(model_dir: Path, row: dict[str, Any]) -> float:
    """The reference: the images before the text of the user's turn, one unpadded forward."""
    paths = row.get("images") or ([row["image_path"]] if "image_path" in row else [])
    pictures = [Image.open(path).convert("RGB") for path in paths]
    user: Any = row["problem"]
    if pictures:
        user = [*({"type": "image"} for _ in pictures), {"type": "text", "text": user}]
    chat = [
        {"role": "user", "content": user},
        {"role": "assistant", "content": row["completion"]},
    ]
    return direct_value(model_dir, chat, pictures)


def test_one_padded_batch_equals_unpadded_forwards_and_a_broken_image_is_masked(
    model_dir: Path, images: list[str]
) -> None:
    component = RewardModel(str(model_dir), max_tokens_per_batch=100_000)
    batch = rows(images)
    runner = build_runner(component.config)
    assert isinstance(runner, VisionRewardModelRunner) and not runner.load_error
    # the fast image processor (torchvision; transformers 4: the ...Fast class)
    image_processor = runner._tokenizer.image_processor
    assert getattr(image_processor, "backend", None) == "torchvision" or type(
        image_processor
    ).__name__.endswith("Fast")
    requests = [component.lane_request(row) for row in batch]
    outcomes = runner.score(requests)

    assert runner.metrics.batches == 1  # the six readable rows went through one forward
    # and their six images through one image-processor call
    assert (runner.metrics.images, runner.metrics.image_calls) == (6, 1)
    want = [expected(model_dir, row) for row in batch[:-1]]
    assert [o.value for o in outcomes[:-1]] == pytest.approx(want, abs=1e-5)
    # the rows differ, so equal values mean something
    assert len({round(v, 6) for v in want}) == len(want)
    assert all(o.ok for o in outcomes[:-1])
    broken = outcomes[-1]
    assert broken.failure == "model_error"
    assert "payload.images[0]: cannot read image" in broken.message
    assert component.settle(requests[-1], broken).status.value == "error"

    # batch_invariant: every row in a pass of its own (its images processed alone), same values
    alone = build_runner(RewardModelConfig(model=str(model_dir), batch_invariant=True))
    assert [o.value for o in alone.score(requests)[:-1]] == pytest.approx(want, abs=1e-5)
    assert alone.metrics.batches == len(want)
    assert (alone.metrics.images, alone.metrics.image_calls) == (6, 5)  # a call a row with images


def test_in_bfloat16_a_value_moves_with_its_batch_unless_batch_invariant(
    model_dir: Path, images: list[str]
) -> None:
    # The VL runner's bf16 value depends on what it is batched with (larger passes, other
    # roundings, in the language model and the vision tower); batch_invariant scores each row
    # alone (its images processed alone), so its value is its single forward's.
    component = RewardModel(str(model_dir))
    readable = rows(images)[:-1]
    variants = [
        {**row, "completion": f"{row['completion']} {'and the sun ' * n}"}
        for n in range(3)
        for row in readable
    ]
    requests = [component.lane_request(row) for row in variants]
    moved, batches = {}, {}
    for invariant in (False, True):
        runner = build_runner(
            RewardModelConfig(model=str(model_dir), dtype="bfloat16", batch_invariant=invariant)
        )
        single = [runner.score([request])[0].value for request in requests]
        runner.metrics.batches = 0
        batched = [o.value for o in runner.score(requests)]
        moved[invariant] = max(abs(a - b) for a, b in zip(single, batched, strict=True))
        batches[invariant] = runner.metrics.batches
    assert moved[False] > 1e-3  # the fast path's bf16 value depends on its batch
    assert moved[True] <= 1e-3  # within 1e-3 of the single unpadded forward (here: equal)
    assert batches == {False: 1, True: len(requests)}


def test_a_truncation_the_model_cannot_honour_fails_the_load_with_the_fix(model_dir: Path) -> None:
    runner = build_runner(RewardModelConfig(model=str(model_dir), truncation="left"))
    assert "set truncation: error (got 'left')" in runner.load_error
    outcome = runner.score([ModelRequest(REWARD_MODEL_LANE, "k", {"text": "a cat"})])[0]
    assert outcome.failure == "model_error" and "inputs are not cut" in outcome.message


def test_pool_and_skyrl_env_values_equal_a_direct_forward_and_a_broken_image_is_masked(
    ray_local: None, model_dir: Path, images: list[str]
) -> None:
    batch = rows(images)
    config = {
        "name": "t_vl_rm_pool",
        "num_workers": 1,
        "rewards": {"reward_model": {"model": str(model_dir)}},
        "model_workers": {"num_workers": 1, "num_cpus_per_worker": 0.5, "batch_size": 8},
    }
    steps = []
    with RewardPool.from_config(config) as pool:
        results = pool.score(batch)
        metrics = pool.metrics()
        try:
            for row in (batch[0], batch[-1]):
                extras = {
                    "reward_spec": {"method": "rule", "ground_truth": "x"},
                    "max_turns": 1,
                    "problem": row["problem"],
                    "image_path": row["image_path"],
                }
                env = skyrl_gym.make(
                    "skyrl_rewards", env_config={"pool": "t_vl_rm_pool"}, extras=extras
                )
                env.init([{"role": "user", "content": row["problem"]}])
                steps.append((env.step(row["completion"]), env.get_metrics()))
        finally:
            close_shared_pools()
    want = [expected(model_dir, row) for row in batch[:-1]]
    assert [r.components["reward_model"] for r in results[:-1]] == pytest.approx(want, abs=1e-5)
    assert all(r.ok for r in results[:-1])
    broken = results[-1]
    assert not broken.ok and broken.status["reward_model"] == "error"
    assert "cannot read image" in broken.errors["reward_model"]
    assert metrics["masked_items"] == 1

    (paid, paid_metrics), (failed, failed_metrics) = steps
    assert paid["reward"] == pytest.approx(want[0], abs=1e-5)
    assert not paid["metadata"]["should_mask"] and paid_metrics["should_mask"] == 0
    assert failed["metadata"]["should_mask"] and failed["reward"] == 0.0
    assert failed["metadata"]["status"]["reward_model"] == "error"
    assert "cannot read image" in failed["metadata"]["errors"]["reward_model"]
    assert failed_metrics["should_mask"] == 1


def test_the_vl_reward_model_scores_inside_a_grpo_trainer(
    model_dir: Path, images: list[str], tmp_path: Path
) -> None:
    # TRL's GRPOTrainer on a tiny Qwen2 policy; fixed completions (one group of four per row)
    # and the rows' image_path column reach the reward: the logged rewards are the model's own
    from datasets import Dataset
    from skyrl_helpers import build_tokenizer
    from trl import GRPOTrainer
    from trl_helpers import fixed_rollout, grpo_args, tiny_model

    from skyrl_rewards.rewards.batch import make_reward

    answers = ["a cat", "the cat sits on a mat", "a dog", "in the park"]
    tokenizer = build_tokenizer()
    question = "where is the cat ?"
    dataset = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": question}], "image_path": images[1]}]
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[make_reward("reward_model", model=str(model_dir))],
        args=grpo_args(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, answers),
    )
    trainer.train()
    want = [
        expected(model_dir, {"problem": question, "completion": a, "image_path": images[1]})
        for a in answers
    ]
    values = list(trainer._logs["rewards"]["reward_model_reward"])
    assert values == pytest.approx(want, abs=1e-5)  # float32 in TRL
    # the image is in the value: the same chat without it scores otherwise
    text_only = expected(model_dir, {"problem": question, "completion": answers[0]})
    assert abs(text_only - want[0]) > 1e-3
