"""A batch with a failed trajectory through SkyRL 0.4's own conversion to a training batch.

The generators contain an agent loop that raises: its trajectory becomes a masked stand-in row.
These tests push such a batch from the real generator (real tokenizer, real reward pool on
Ray, real Qwen2-VL image processing; only the inference engine stood in) through SkyRL's
``RayPPOTrainer.convert_to_training_input`` (which pads it with ``pad_training_input_batch``)
and its workers' micro-batching (``BatchIterator``, one row per micro-batch as by default). The
vision micro-batches then go through a small random Qwen2.5-VL (transformers), fed the way
SkyRL's ``HFModelWrapper.forward`` feeds it; that wrapper itself imports flash-attn, which the
CPU install lacks.
"""

from __future__ import annotations

import asyncio
import copy
import json
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from skyrl.backends.skyrl_train.training_batch import TensorList, TrainingInputBatch
from skyrl.backends.skyrl_train.utils.sample_support import (
    SAMPLE_SUPPORT_FIELD,
    SAMPLE_SUPPORT_PADDING,
)
from skyrl.backends.skyrl_train.workers.worker_utils import BatchIterator
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.base import TRAINING_PHASE_EVAL, TRAINING_PHASE_TRAIN
from skyrl.train.generators.skyrl_vlm_generator import SkyRLVLMGymGenerator
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import validate_generator_output
from skyrl_helpers import SideChannelEngine, VisionEngine
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

from skyrl_rewards.data.jsonl import read_rows
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.train.config import TrainConfig
from skyrl_rewards.train.dataset import prepare_data
from skyrl_rewards.train.env import close_shared_pools
from skyrl_rewards.train.generator import (
    TextRowInVisionBatchError,
    clean_prompt,
    make_generator,
)
from skyrl_rewards.train.registration import register_installed_envs

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
DP_SIZE = 3  # data-parallel workers: a batch of 4 is padded to 6


@pytest.fixture(scope="module", autouse=True)
def _envs_registered() -> None:
    assert "skyrl_rewards" in register_installed_envs()


@pytest.fixture(scope="module")
def pool(ray_local: None) -> Any:
    name = "skyrl_trainer_failed_row_pool"
    started = RewardPool.from_config(
        ROOT / "configs" / "rec.yaml", [f"name={name}", "num_workers=1"]
    )
    yield name
    close_shared_pools()
    started.shutdown()


class Dispatch:
    """Stand-in for the trainer's GPU worker dispatch: only its data-parallel size is read."""

    def get_lcm_dp_size(self) -> int:
        return DP_SIZE


def rec_dataset(tmp_path: Path, tokenizer: Any) -> PromptDataset:
    """SkyRL's PromptDataset over the prepared parquet of two sample REC rows."""
    rows = read_rows(SAMPLE / "rec.jsonl")[:2]
    (tmp_path / "images").mkdir()
    for row in rows:
        shutil.copy(SAMPLE / row["image_path"], tmp_path / row["image_path"])
    with (tmp_path / "rec.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    train, val = prepare_data(tmp_path / "rec.jsonl", tmp_path / "data", "skyrl_rewards")
    return PromptDataset([str(train), str(val)], tokenizer, 1_000_000, num_workers=1)


ANSWER = '<think>There.</think> <answer>{"bbox_2d": [1, 2, 30, 40]}</answer>'
REPLIES = {
    "0_0": [ANSWER],
    "0_1": [ConnectionError("inference server went away")],
    "1_0": [ANSWER],
    "1_1": ["I cannot tell."],
}


def rec_config(pool: str, *, vision: bool, extra: Sequence[str] = ()) -> TrainConfig:
    """Two prompts, two samples each, one turn, on the REC env and ``pool``."""
    return TrainConfig.from_cli_overrides(
        [
            "trainer.logger=console",
            "trainer.strategy=fsdp",
            "trainer.train_batch_size=2",
            "trainer.policy_mini_batch_size=2",
            "data.dataloader.num_workers=0",  # the trainer builds a loader; nothing reads it
            "generator.batched=false",
            "generator.n_samples_per_prompt=2",
            f"generator.vision_language_generator={str(vision).lower()}",
            "generator.use_conversation_multi_turn=true",
            "generator.max_turns=1",
            "environment.env_class=skyrl_rewards",
            f"environment.skyrl_gym.skyrl_rewards.pool={pool}",
            *extra,
        ]
    )


def generate_with_one_failure(
    tmp_path: Path,
    tokenizer: Any,
    pool: str,
    *,
    vision: bool,
    extra: Sequence[str] = (),
    engine_cls: type[VisionEngine] = VisionEngine,
    replies: dict[str, list[Any]] = REPLIES,
) -> tuple[RayPPOTrainer, dict, list[str]]:
    """Two prompts, two samples each; trajectory ``0_1`` fails (by default its inference call).

    Returns SkyRL's trainer (GPU dispatch stood in), the generator output and the uids.
    """
    dataset = rec_dataset(tmp_path, tokenizer)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, uids = prepare_generator_input(
        prompts, 2, None, "skyrl_rewards", TRAINING_PHASE_TRAIN, 1
    )
    cfg = rec_config(pool, vision=vision, extra=extra)
    engine = engine_cls(tokenizer, copy.deepcopy(replies), logprobs=True)
    generator = make_generator(cfg, engine, tokenizer)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    trainer = RayPPOTrainer(cfg, None, tokenizer, dataset, engine, generator)
    trainer.dispatch = Dispatch()
    return trainer, out, uids


def check_failed_row(out: dict, training_input: TrainingInputBatch) -> None:
    """Row 1 (``0_1``) failed: masked in the batch, its reward its group's judged mean."""
    validate_generator_output(4, out)  # as RayPPOTrainer.generate does
    assert out["stop_reasons"][1] == "rollout_error"
    assert out["rollout_metrics"]["generate/env_errors"] == 1.0
    assert len(training_input) == 6 and training_input.metadata["pad_size"] == 2
    loss_mask = training_input["loss_mask"]
    assert loss_mask[1].sum() == 0 and loss_mask[4:].sum() == 0  # failed row, padding
    assert all(loss_mask[i].sum() > 0 for i in (0, 2, 3))
    rewards = training_input["rewards"].sum(dim=1)
    assert rewards[1] == pytest.approx(float(rewards[0]))  # group 0's only judged reward
    assert training_input["rollout_logprobs"] is not None  # SkyRL collects them by default
    assert torch.isfinite(training_input["rollout_logprobs"]).all()


def test_text_batch_with_a_failed_trajectory_converts_to_a_training_batch(
    pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    trainer, out, uids = generate_with_one_failure(tmp_path, tokenizer, pool, vision=False)
    assert out["response_ids"][1] == [tokenizer.eos_token_id]  # the one-token stand-in
    training_input = trainer.convert_to_training_input(out, uids)
    check_failed_row(out, training_input)
    assert training_input.get("pixel_values") is None


def tiny_qwen2_5_vl(tokenizer: Any) -> Qwen2_5_VLForConditionalGeneration:
    """A randomly initialised Qwen2.5-VL small enough for CPU, on the test tokenizer's ids."""
    image_pad, vision_start, vision_end = tokenizer.convert_tokens_to_ids(
        ["<|image_pad|>", "<|vision_start|>", "<|vision_end|>"]
    )
    config = Qwen2_5_VLConfig(
        text_config={
            "vocab_size": len(tokenizer),
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "rope_scaling": {"type": "mrope", "mrope_section": [2, 3, 3]},
            "bos_token_id": None,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={
            "depth": 1,
            "hidden_size": 16,
            "intermediate_size": 32,
            "num_heads": 2,
            "out_hidden_size": 32,
            "fullatt_block_indexes": [0],
        },
        image_token_id=image_pad,
        video_token_id=vision_end,  # no videos here; any id that is not a text token
        vision_start_token_id=vision_start,
        vision_end_token_id=vision_end,
    )
    torch.manual_seed(0)
    return Qwen2_5_VLForConditionalGeneration(config).eval()


def forward_like_skyrl(model: Any, experience: Any) -> torch.Tensor:
    """Logits of one micro-batch, its images passed as ``HFModelWrapper.forward`` passes them."""
    sequences = experience.sequences
    with torch.no_grad():
        return model(
            sequences,
            attention_mask=experience.attention_mask,
            position_ids=None,
            pixel_values=torch.cat(experience.pixel_values.tensors, dim=0),
            image_grid_thw=torch.cat(experience.image_grid_thw.tensors, dim=0),
            mm_token_type_ids=(sequences == model.config.image_token_id).long(),
        )["logits"]


def test_vision_batch_with_a_failed_trajectory_converts_and_runs_per_micro_batch(
    pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    trainer, out, uids = generate_with_one_failure(tmp_path, tokenizer, pool, vision=True)
    pixel_values, image_grid_thw = out["pixel_values"], out["image_grid_thw"]
    assert all(isinstance(pv, torch.Tensor) for pv in pixel_values)  # no None among them
    assert all(isinstance(thw, torch.Tensor) for thw in image_grid_thw)
    training_input = trainer.convert_to_training_input(out, uids)
    check_failed_row(out, training_input)
    assert isinstance(training_input["pixel_values"], TensorList)
    assert len(training_input["pixel_values"]) == len(training_input["image_grid_thw"]) == 6

    model = tiny_qwen2_5_vl(tokenizer)
    merge = model.config.vision_config.spatial_merge_size
    micro_batches = list(BatchIterator(training_input, 1))  # SkyRL's default micro-batch size
    assert len(micro_batches) == 6
    for experience in micro_batches:
        thw = experience.image_grid_thw[0]
        n_image_tokens = int((experience.sequences == model.config.image_token_id).sum())
        assert n_image_tokens == int(thw.prod(dim=-1).sum()) // merge**2 > 0
        logits = forward_like_skyrl(model, experience)
        assert logits.shape[:2] == experience.sequences.shape
        assert torch.isfinite(logits).all()


def test_a_response_with_an_image_placeholder_is_masked_and_the_batch_trains(
    pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    """A sampled ``<|image_pad|>`` in a response: SkyRL's forward would read it as an image slot
    (one more slot than features: the micro-batch raises); the trajectory becomes a stand-in."""
    replies = {**REPLIES, "0_1": ["<|image_pad|> " + ANSWER]}
    trainer, out, uids = generate_with_one_failure(
        tmp_path, tokenizer, pool, vision=True, replies=replies
    )
    image_pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
    assert all(image_pad not in ids for ids in out["response_ids"])
    training_input = trainer.convert_to_training_input(out, uids)
    check_failed_row(out, training_input)
    model = tiny_qwen2_5_vl(tokenizer)
    for experience in BatchIterator(training_input, 1):
        assert torch.isfinite(forward_like_skyrl(model, experience)).all()
    # the fault was real: the scripted response, as the engine wrote it, fails that forward
    scripted = tokenizer.encode(replies["0_1"][0], add_special_tokens=False)
    assert scripted.count(image_pad) == 1
    (row,) = [e for i, e in enumerate(BatchIterator(training_input, 1)) if i == 1]
    sequences = row.sequences.clone()
    sequences[0, -1] = image_pad
    row.sequences = sequences
    with pytest.raises(ValueError, match="Image features and image tokens do not match"):
        forward_like_skyrl(model, row)


def test_routes_and_sample_supports_of_a_failed_trajectory_pass_skyrls_checks(
    pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    """MoE router replay (R3) and sample-support capture on: every row carries both or the
    trainer refuses the batch; the stand-in gets a one-row dummy route and padding supports."""
    extra = [
        "trainer.strategy=megatron",  # R3 is Megatron-only in SkyRL 0.4 (utils.validate_cfg)
        "trainer.policy.megatron_config.moe_enable_routing_replay=true",
        "generator.inference_engine.enable_return_routed_experts=true",
        "generator.inference_engine.distributed_executor_backend=mp",
        "generator.inference_engine.enable_return_sample_support_set=true",
        "generator.sampling_params.top_k=4",
        "trainer.algorithm.enable_sample_support_replay=true",
    ]
    trainer, out, uids = generate_with_one_failure(
        tmp_path, tokenizer, pool, vision=False, extra=extra, engine_cls=SideChannelEngine
    )
    routes, supports = out["rollout_expert_indices"], out[SAMPLE_SUPPORT_FIELD]
    assert all(isinstance(r, np.ndarray) for r in routes)
    assert routes[1].shape == (1, *routes[0].shape[1:])  # the stand-in's dummy route
    assert (supports[1] == SAMPLE_SUPPORT_PADDING).all()
    assert supports[1].shape == (len(out["response_ids"][1]), 4)
    validate_generator_output(4, out, routes_expected=True)
    training_input = trainer.convert_to_training_input(out, uids)
    check_failed_row(out, training_input)
    # the stand-in's one route row is its only captured one: the router skips its other tokens
    assert int((~training_input["router_padding_mask"][1]).sum()) == 1
    assert training_input[SAMPLE_SUPPORT_FIELD] is not None


def test_a_vision_batch_with_a_text_only_row_is_refused_with_the_cause(
    pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    """SkyRL 0.4 cannot train a vision batch in which some rows have no image: its own VLM
    generator's output fails in ``convert_to_training_input``. Ours says so at generation."""
    dataset = rec_dataset(tmp_path, tokenizer)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, uids = prepare_generator_input(
        prompts, 2, None, "skyrl_rewards", TRAINING_PHASE_TRAIN, 1
    )
    # SkyRL's own generator renders the parquet's null keys as images (clean_prompt's docstring)
    batch["prompts"] = [clean_prompt(prompt) for prompt in batch["prompts"]]
    for i in (2, 3):  # prompt 1's rows: the question as text, no image part
        batch["prompts"][i] = [
            {**m, "content": [p for p in m["content"] if p["type"] == "text"]}
            if isinstance(m["content"], list)
            else m
            for m in batch["prompts"][i]
        ]
    cfg = rec_config(pool, vision=True)
    replies = {"0_0": [ANSWER], "0_1": ["I cannot tell."], "1_0": [ANSWER], "1_1": [ANSWER]}

    plain = SkyRLVLMGymGenerator(
        cfg.generator, cfg.environment.skyrl_gym, VisionEngine(tokenizer, replies), tokenizer
    )
    out = asyncio.run(plain.generate(copy.deepcopy(batch), disable_tqdm=True))
    assert out["pixel_values"][2] is None and out["pixel_values"][0] is not None
    trainer = RayPPOTrainer(cfg, None, tokenizer, dataset, plain.inference_engine_client, plain)
    trainer.dispatch = Dispatch()
    with pytest.raises(AttributeError, match="'NoneType' object has no attribute 'device'"):
        trainer.convert_to_training_input(out, uids)

    ours = make_generator(cfg, VisionEngine(tokenizer, replies), tokenizer)
    with pytest.raises(
        TextRowInVisionBatchError, match=r"rows \[2, 3\].*vision_language_generator"
    ):
        asyncio.run(ours.generate(copy.deepcopy(batch), disable_tqdm=True))

    # evaluation never builds a training batch: SkyRL's own output passes its checks, and ours
    eval_batch, _ = prepare_generator_input(
        prompts, 2, None, "skyrl_rewards", TRAINING_PHASE_EVAL, 1
    )
    eval_batch["prompts"] = batch["prompts"]
    ours = make_generator(cfg, VisionEngine(tokenizer, replies), tokenizer)
    evaluated = asyncio.run(ours.generate(eval_batch, disable_tqdm=True))
    validate_generator_output(len(eval_batch["prompts"]), evaluated)
    assert evaluated["pixel_values"][2] is None and evaluated["rewards"][0] == out["rewards"][0]


def test_batched_generation_is_refused_with_the_fix(pool: str, tokenizer: Any) -> None:
    cfg = rec_config(pool, vision=False)
    cfg.generator.batched = True
    with pytest.raises(ValueError, match="generator.batched=false"):
        make_generator(cfg, VisionEngine(tokenizer, {}), tokenizer)
