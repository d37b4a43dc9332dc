"""Both envs inside the real SkyRL 0.4: its config parser, its PromptDataset over this project's
parquet, its generators (through ``make_generator``) and the project's reward pool on Ray.

Only the inference engine is stood in for (``ScriptedEngine``: the GPU part); prompts are
rendered with the real Qwen2.5-VL chat template.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from skyrl.train.dataset import PromptDataset
from skyrl.train.generators.base import TRAINING_PHASE_TRAIN
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import validate_generator_output
from skyrl_helpers import IMAGE_PLACEHOLDER, ScriptedEngine

from skyrl_rewards.data.jsonl import read_rows, to_samples
from skyrl_rewards.pool.config import load_pool_config
from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.train.config import TrainConfig
from skyrl_rewards.train.dataset import prepare_data
from skyrl_rewards.train.env import close_shared_pools
from skyrl_rewards.train.generator import (
    MaskingGymGenerator,
    MaskingVLMGymGenerator,
    _impute_masked_rewards,
    make_generator,
)
from skyrl_rewards.train.registration import register_installed_envs
from tau_bench_env.backends import load_domain
from tau_bench_env.data_model.tasks import RESPOND

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
COMMON = ["trainer.logger=console", "trainer.strategy=fsdp", "generator.batched=false"]


@pytest.fixture(scope="module", autouse=True)
def _envs_registered() -> None:
    assert {"skyrl_rewards", "tau_bench_env", "tau_bench"} <= set(register_installed_envs())


def prompt_dataset(parquets: list[Path], tokenizer: Any) -> PromptDataset:
    # byte-level test tokenizer: one token per byte, so the tau system prompt is long
    return PromptDataset([str(p) for p in parquets], tokenizer, 1_000_000, num_workers=1)


def dataset_batch(parquets: list[Path], tokenizer: Any, env_class: str, n_samples: int = 1) -> dict:
    """What SkyRL's trainer hands the generator for these parquet files (its own helpers)."""
    dataset = prompt_dataset(parquets, tokenizer)
    prompts = dataset.collate_fn([dataset[i] for i in range(len(dataset))])
    batch, _ = prepare_generator_input(prompts, n_samples, None, env_class, TRAINING_PHASE_TRAIN, 1)
    return batch


def last_token_rewards(out: dict) -> list[float]:
    return [sum(r) if isinstance(r, list) else r for r in out["rewards"]]


# ---- the launch scripts' override lists, through SkyRL's own parser -----------------------


@pytest.mark.parametrize(
    ("script", "family"),
    [
        ("launch_grpo_rec.sh", "qwen3_vl"),  # the default: 0-1000 boxes
        ("launch_grpo_rec.sh", "qwen2_5_vl"),  # resized pixels, MAX_PIXELS to engine and reward
        ("launch_grpo_tau_retail.sh", None),
    ],
)
def test_launch_scripts_overrides_pass_skyrls_parser(
    script: str, family: str | None, tmp_path: Path
) -> None:
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path), FAMILY=family or "")
    out = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch" / script), "--check"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "config OK" in out.stdout
    assert (tmp_path / "train.parquet").is_file()
    if family is not None:  # every row and the reward read boxes in the family's format
        assert {
            row["box_format"] for row in pq.read_table(tmp_path / "train.parquet").to_pylist()
        } == {family}
        assert f"rewards.iou.box_format={family}" in out.stdout
        bad = subprocess.run(
            ["bash", str(ROOT / "scripts" / "launch" / script), "--check"]
            + ["reward_pool.overrides=[rewards.iou.box_format=qwen3]"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert bad.returncode == 2 and "did you mean 'qwen3_vl'" in bad.stderr


def test_env_sections_take_plain_overrides() -> None:
    cfg = TrainConfig.from_cli_overrides(
        [
            *COMMON,
            "environment.skyrl_gym.tau_bench_env.user.kind=replay",
            "environment.skyrl_gym.tau_bench_env.user.timeout_s=5",
            "environment.skyrl_gym.skyrl_rewards.pool=vlm_rewards",
        ]
    )
    gym = cfg.environment.skyrl_gym
    assert gym.tau_bench_env.user.kind == "replay" and gym.tau_bench_env.user.timeout_s == 5
    assert gym.skyrl_rewards.pool == "vlm_rewards"
    with pytest.raises(ValueError, match="nope"):
        TrainConfig.from_cli_overrides(["environment.skyrl_gym.tau_bench_env.user.nope=1"])
    with pytest.raises(ValueError, match="on_env_error"):
        TrainConfig.from_cli_overrides(["environment.skyrl_gym.on_env_error=ignore"])


def test_the_readme_command_checks_without_wandb(tmp_path: Path) -> None:
    """The README's SkyRL command, as written (no trainer.logger), on a machine without W&B."""
    prepared = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "data" / "prepare_skyrl_data.py")]
        + ["--input", str(SAMPLE / "rec.jsonl"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    readme = [
        f"data.train_data=['{tmp_path / 'train.parquet'}']",
        f"data.val_data=['{tmp_path / 'validation.parquet'}']",
        "environment.env_class=skyrl_rewards",
        "environment.skyrl_gym.skyrl_rewards.pool=vlm_rewards",
        "reward_pool.config=configs/pool.yaml",
        "reward_pool.rewards=configs/rec.yaml",
        "reward_pool.overrides=[name=vlm_rewards]",
        "generator.vision_language_generator=true",
    ]
    out = subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", *readme, "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.endswith("trainer.logger: console\nconfig OK\n")
    # no notices about the missing GPU (issue 34: five to seven lines before ``config OK``)
    notices = ("Triton", "CUDA", "vllm._C", "DeepSelect", "libcuda", "patch")
    assert [line for line in out.stderr.splitlines() if any(n in line for n in notices)] == []
    # and a config SkyRL refuses is still said
    refused = subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", "--check"]
        + ["environment.skyrl_gym.on_env_error=ignore"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode == 2
    assert "python -m skyrl_rewards.train: config error:" in refused.stderr
    assert "on_env_error" in refused.stderr
    assert TrainConfig.from_cli_overrides([]).trainer.logger == "console"
    assert TrainConfig.from_cli_overrides(["trainer.logger=wandb"]).trainer.logger == "wandb"


def test_help_runs() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0
    assert "environment.skyrl_gym.tau_bench_env.user.kind='openai'" in out.stdout


# ---- REC through the VLM generator and a real reward pool ------------------------------------


@pytest.fixture(scope="module")
def rec_pool(ray_local: None) -> Any:
    name = "skyrl_trainer_rec_pool"
    pool = RewardPool.from_config(ROOT / "configs" / "rec.yaml", [f"name={name}", "num_workers=1"])
    yield name
    close_shared_pools()
    pool.shutdown()


def rec_rows(tmp_path: Path) -> list[dict]:
    """Four sample REC rows with their images copied, the last one's image later deleted."""
    rows = read_rows(SAMPLE / "rec.jsonl")[:4]
    (tmp_path / "images").mkdir()
    for row in rows:
        shutil.copy(SAMPLE / row["image_path"], tmp_path / row["image_path"])
    with (tmp_path / "rec.jsonl").open("w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return rows


def test_rec_rows_train_through_the_vlm_generator_and_the_pool(
    rec_pool: str, tokenizer: Any, tmp_path: Path
) -> None:
    rows = rec_rows(tmp_path)
    train, val = prepare_data(tmp_path / "rec.jsonl", tmp_path / "data", "skyrl_rewards")
    (tmp_path / rows[3]["image_path"]).unlink()  # the image is gone by training time
    batch = dataset_batch([train, val], tokenizer, "skyrl_rewards")
    assert len(batch["prompts"]) == 4
    gold = '<think>I see it.</think> <answer>{{"bbox_2d": {}}}</answer>'
    replies = {
        "0_0": [rows[0]["completion"]],  # the sample's own answer
        "1_0": [gold.format(rows[1]["solution"].split("<answer>")[1].split("</answer>")[0])],
        "2_0": ["I cannot tell."],  # malformed: no box, no format
        "3_0": [rows[3]["completion"]],  # its image is missing
    }
    engine = ScriptedEngine(tokenizer, replies)
    cfg = TrainConfig.from_cli_overrides(
        [
            *COMMON,
            "generator.vision_language_generator=true",
            "generator.use_conversation_multi_turn=true",
            "generator.max_turns=1",
            "environment.env_class=skyrl_rewards",
            f"environment.skyrl_gym.skyrl_rewards.pool={rec_pool}",
        ]
    )
    generator = make_generator(cfg, engine, tokenizer)
    assert isinstance(generator, MaskingVLMGymGenerator)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))

    mix = RewardMix.from_config(load_pool_config(ROOT / "configs" / "rec.yaml").rewards)
    samples = to_samples(rows, SAMPLE)
    expected = [
        mix.score({**samples[0], "completion": replies["0_0"][0]}).total,
        mix.score({**samples[1], "completion": replies["1_0"][0]}).total,
        0.0,
    ]
    rewards = last_token_rewards(out)
    assert rewards[:3] == pytest.approx(expected)
    assert expected[1] == pytest.approx(2.0)  # gold box and format: iou 1 + format 1
    for reward, mask in zip(out["rewards"][:3], out["loss_masks"][:3], strict=True):
        assert reward[-1] == sum(reward) and any(mask)  # paid on the last token, trained on
    # the missing image: a fallback, masked all the way to the loss, no exception
    assert out["loss_masks"][3] == [0] * len(out["loss_masks"][3]) and rewards[3] == 0.0
    assert out["env_metrics"][3]["should_mask"] == 1.0
    metrics = out["rollout_metrics"]
    assert metrics["generate/masked_share"] == pytest.approx(0.25)
    assert metrics["environment/should_mask"] == pytest.approx(0.25)
    assert "environment/reward/iou" in metrics
    assert metrics["environment/clamped_boxes"] == 0.0  # qwen2_5_vl pixels: nothing to clamp
    # the prompt as rendered: one image placeholder per image, the question as text
    for messages in engine.rendered:
        text = json.dumps(messages)
        assert '"image_url": null' not in text
        rendered = tokenizer.apply_chat_template(messages, tokenize=False)
        assert rendered.count(IMAGE_PLACEHOLDER) == 1
        assert "bounding box coordinate" in rendered


def test_parquet_round_trip_adds_null_keys_that_would_render_a_second_image(
    tokenizer: Any, tmp_path: Path
) -> None:
    rec_rows(tmp_path)
    train, _ = prepare_data(tmp_path / "rec.jsonl", tmp_path / "data", "skyrl_rewards")
    raw = pq.read_table(train).to_pylist()[0]["prompt"]
    assert raw[0]["content"][1]["image_url"] is None  # arrow's union of keys
    assert tokenizer.apply_chat_template(raw, tokenize=False).count(IMAGE_PLACEHOLDER) == 2


# ---- tau-bench through the text generator ----------------------------------------------------


def tool_call(name: str, kwargs: dict) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': kwargs})}\n</tool_call>"


def gold_turns(task: Any) -> list[str]:
    turns = [
        str(a.kwargs["content"]) if a.name == RESPOND else tool_call(a.name, dict(a.kwargs))
        for a in task.actions
    ]
    closing = "To confirm: " + ", ".join(task.outputs) + "." if task.outputs else "Anything else?"
    return [*turns, closing]


def tau_parquet(tmp_path: Path, n_tasks: int) -> tuple[Path, list[Any]]:
    """The dataset script's parquet for the first ``n_tasks`` retail test tasks whose ground truth
    writes data (a read-only run cannot pass them), with user turns for the replay user."""
    out = tmp_path / "tau.parquet"
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "data" / "tau_bench_dataset.py"),
            "--domain",
            "retail",
        ]
        + ["--split", "test", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    domain = load_domain("tau2", "retail")
    writes = [
        i
        for i, task in enumerate(domain.tasks("test"))
        if any(a.name not in domain.read_only_tools and a.name != RESPOND for a in task.actions)
    ][:n_tasks]
    rows = [pq.read_table(out).to_pylist()[i] for i in writes]
    for row in rows:
        row["user_turns"] = ["Hi, I need help with my order."]
    pq.write_table(pa.Table.from_pylist(rows), out)
    return out, [domain.tasks("test")[i] for i in writes]


def tau_cfg(*extra: str) -> Any:
    return TrainConfig.from_cli_overrides(
        [
            *COMMON,
            "generator.use_conversation_multi_turn=true",
            "generator.max_turns=30",
            "generator.max_input_length=200000",
            "environment.env_class=tau_bench_env",
            "environment.skyrl_gym.tau_bench_env.backend=tau2",
            "environment.skyrl_gym.tau_bench_env.domain=retail",
            *extra,
        ]
    )


def unreachable_user_cfg() -> Any:
    """tau config whose user simulator is an endpoint nothing listens on (the discard port)."""
    return tau_cfg(
        "environment.skyrl_gym.tau_bench_env.user.kind=openai",
        "environment.skyrl_gym.tau_bench_env.user.base_url=http://127.0.0.1:9/v1",
        "environment.skyrl_gym.tau_bench_env.user.max_retries=0",
        "environment.skyrl_gym.tau_bench_env.user.timeout_s=2",
    )


def test_tau_gold_actions_earn_the_reward_on_the_last_token(tokenizer: Any, tmp_path: Path) -> None:
    parquet, tasks = tau_parquet(tmp_path, 3)
    batch = dataset_batch([parquet], tokenizer, "tau_bench_env", n_samples=2)
    # sample 0 of each task plays the ground truth, sample 1 stops at once
    replies = {f"{i}_0": gold_turns(task) for i, task in enumerate(tasks)}
    replies |= {f"{i}_1": ["Goodbye."] for i in range(len(tasks))}
    cfg = tau_cfg("environment.skyrl_gym.tau_bench_env.user.kind=replay")
    generator = make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer)
    assert isinstance(generator, MaskingGymGenerator)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    rewards = last_token_rewards(out)
    by_task = {
        (tid.instance_id, tid.repetition_id): r
        for tid, r in zip(batch["trajectory_ids"], rewards, strict=True)
    }
    for i in range(len(tasks)):
        assert by_task[(str(i), 0)] == 1.0, tasks[i].task_id
        assert by_task[(str(i), 1)] == 0.0  # a judgement: trained on, not masked
    for reward, mask in zip(out["rewards"], out["loss_masks"], strict=True):
        assert reward[-1] == sum(reward) and any(mask)
    assert out["rollout_metrics"]["generate/masked_share"] == 0.0


def test_unreachable_user_masks_the_trajectories_without_an_exception(
    tokenizer: Any, tmp_path: Path
) -> None:
    parquet, tasks = tau_parquet(tmp_path, 2)
    batch = dataset_batch([parquet], tokenizer, "tau_bench_env")
    replies = {f"{i}_0": ["Hello, how can I help?"] for i in range(len(tasks))}
    cfg = unreachable_user_cfg()
    out = asyncio.run(
        make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer).generate(
            batch, disable_tqdm=True
        )
    )
    assert last_token_rewards(out) == [0.0, 0.0]
    assert all(not any(mask) for mask in out["loss_masks"])
    assert out["rollout_metrics"]["generate/masked_share"] == 1.0
    assert out["rollout_metrics"]["environment/should_mask"] == 1.0


def test_an_env_that_raises_ends_one_trajectory_or_the_step_when_asked(
    tokenizer: Any, tmp_path: Path
) -> None:
    parquet, tasks = tau_parquet(tmp_path, 2)
    batch = dataset_batch([parquet], tokenizer, "tau_bench_env")
    batch["env_extras"][1]["task_index"] = 10_000  # a row the env refuses (ValueError in make)
    replies = {"0_0": ["Goodbye."], "1_0": ["Goodbye."]}
    cfg = tau_cfg("environment.skyrl_gym.tau_bench_env.user.kind=replay")
    out = asyncio.run(
        make_generator(cfg, ScriptedEngine(tokenizer, replies), tokenizer).generate(
            batch, disable_tqdm=True
        )
    )
    assert out["loss_masks"][1] == [0] and out["stop_reasons"][1] == "rollout_error"
    assert any(out["loss_masks"][0])
    assert out["rollout_metrics"]["generate/env_errors"] == 1.0
    raising = tau_cfg(
        "environment.skyrl_gym.tau_bench_env.user.kind=replay",
        "environment.skyrl_gym.on_env_error=raise",
    )
    with pytest.raises(ValueError, match="task_index"):
        asyncio.run(
            make_generator(raising, ScriptedEngine(tokenizer, dict(replies)), tokenizer).generate(
                batch, disable_tqdm=True
            )
        )


class Dispatch:
    """Stand-in for the trainer's GPU worker dispatch: only its data-parallel size is read."""

    def get_lcm_dp_size(self) -> int:
        return 4


def test_step_wise_batch_imputes_masked_trajectories_and_skyrl_gives_them_no_advantage(
    ray_local: None, tokenizer: Any, tmp_path: Path
) -> None:
    """Step-wise training (every turn a row; the outcome, and GRPO's advantage, on the last).

    Two tasks, three samples each: the ground truth (1.0), a goodbye (0.0), and a third that
    is masked after two turns (task 0: the user simulator fails) or fails in the env's
    constructor (task 1: a stand-in). Through SkyRL's step-wise ``generate``, its output
    validation, the trainer's postprocessing (with and without merging the steps),
    conversion and GRPO advantages. (SkyRL's trainer reads Ray's state when built.)
    """
    parquet, tasks = tau_parquet(tmp_path, 2)
    dataset = prompt_dataset([parquet], tokenizer)
    batch = dataset_batch([parquet], tokenizer, "tau_bench_env", n_samples=3)
    batch["env_extras"][2]["user_turns"] = [
        "Hi, I need help with my order.",
        {"content": "Let me look.", "tool_calls": [{"name": "check_order", "arguments": {}}]},
    ]  # retail users have no tools: the second user turn fails, and the episode is void
    batch["env_extras"][5]["task_index"] = 10_000  # a row the env refuses (ValueError in make)
    replies = {f"{i}_0": gold_turns(task) for i, task in enumerate(tasks)}
    replies |= {f"{i}_1": ["Goodbye."] for i in range(len(tasks))}
    replies["0_2"] = [tool_call("get_user_details", {"user_id": "nobody"}), "Let me check."]
    cfg = tau_cfg(
        "environment.skyrl_gym.tau_bench_env.user.kind=replay",
        "generator.step_wise_trajectories=true",
        "generator.n_samples_per_prompt=3",
        "trainer.train_batch_size=2",
        "trainer.policy_mini_batch_size=2",
        "data.dataloader.num_workers=0",  # the trainer builds a loader; nothing reads it
    )
    engine = ScriptedEngine(tokenizer, replies, logprobs=True)
    generator = make_generator(cfg, engine, tokenizer)
    out = asyncio.run(generator.generate(batch, disable_tqdm=True))
    validate_generator_output(6, out, step_wise=True)  # as RayPPOTrainer.generate does

    trajectories = [(t.instance_id, t.repetition_id) for t in out["trajectory_ids"]]
    outcome = {
        tid: sum(reward)
        for tid, reward, last in zip(trajectories, out["rewards"], out["is_last_step"], strict=True)
        if last
    }
    assert outcome == {
        ("0", 0): 1.0,
        ("0", 1): 0.0,
        ("0", 2): 0.5,
        ("1", 0): 1.0,
        ("1", 1): 0.0,
        ("1", 2): 0.5,
    }  # the masked ones: their group's judged mean, by trajectory (the gold ones have many steps)
    assert trajectories.count(("0", 2)) == 2 and trajectories.count(("1", 2)) == 1
    assert trajectories.count(("0", 0)) > 2
    void = [i for i, tid in enumerate(trajectories) if tid[1] == 2]
    assert all(not any(out["loss_masks"][i]) for i in void)
    assert sum(out["rewards"][void[0]]) == 0.0  # the masked trajectory's first step
    assert out["stop_reasons"][void[-1]] == "rollout_error"
    assert out["rollout_metrics"]["generate/masked_share"] == pytest.approx(2 / 6)
    assert out["rollout_metrics"]["generate/env_errors"] == 1.0

    for merge in (False, True):
        trainer_cfg = copy.deepcopy(cfg)
        trainer_cfg.generator.merge_stepwise_output = merge
        trainer = RayPPOTrainer(trainer_cfg, None, tokenizer, dataset, engine, generator)
        trainer.dispatch = Dispatch()
        uids = [tid.instance_id for tid in out["trajectory_ids"]]  # as the trainer does
        post, uids = trainer.postprocess_generator_output(copy.deepcopy(out), uids)
        rows = [(t.instance_id, t.repetition_id) for t in post["trajectory_ids"]]
        training_input = trainer.convert_to_training_input(post, uids)
        training_input["values"] = None  # GRPO: no critic
        advantages = trainer.compute_advantages_and_returns(training_input)["advantages"]
        response_mask = training_input["response_mask"].bool()
        by_trajectory: dict[tuple[str, int], list[float]] = {}
        for i, tid in enumerate(rows):
            by_trajectory.setdefault(tid, []).extend(advantages[i][response_mask[i]].tolist())
        # the baseline is the judged mean 0.5, so judged advantages are +-a; the masked get 0.0
        a = 0.5 / float(torch.tensor([1.0, 0.0, 0.5]).std())
        for (_, sample), values in by_trajectory.items():
            expected = {0: a, 1: -a, 2: 0.0}[sample]
            assert values == pytest.approx([expected] * len(values), abs=1e-4)
        assert training_input["loss_mask"][[i for i, t in enumerate(rows) if t[1] == 2]].sum() == 0


@pytest.mark.parametrize(
    ("rewards", "masked", "groups", "last", "expected"),
    [
        # a masked trajectory takes its group's mean judged reward: the baseline does not move
        ([[0, 1.0], [0, 0.0], [0, 0.0]], [False, False, True], [0, 0, 0], None, [1.0, 0.0, 0.5]),
        # a group with nothing judged: 0.0
        ([[2.0], [3.0]], [True, True], [0, 0], None, [0.0, 0.0]),
        # groups are kept apart
        ([1.0, 0.0, 0.0], [False, True, True], [0, 0, 1], None, [1.0, 1.0, 0.0]),
        # step-wise rows: a trajectory counts once, by its last step; a masked one's earlier
        # steps are zeroed (trajectories: 2 steps judged 1.0, 1 step judged 0.0, 2 steps masked)
        (
            [[0.0, 0.0], [0.0, 1.0], [0.0], [0.0, 0.3], [0.0, 0.0]],
            [False, False, False, True, True],
            [0, 0, 0, 0, 0],
            [False, True, True, False, True],
            [0.0, 1.0, 0.0, 0.0, 0.5],
        ),
    ],
)
def test_masked_rewards_are_imputed_per_group(rewards, masked, groups, last, expected) -> None:
    out = _impute_masked_rewards(rewards, masked, groups, last)
    assert [sum(r) if isinstance(r, list) else r for r in out] == expected


def test_a_started_pool_must_be_the_one_the_env_connects_to() -> None:
    from skyrl_rewards.train.entrypoint import parse_config

    base = [*COMMON, "environment.env_class=skyrl_rewards", "reward_pool.config=configs/pool.yaml"]
    with pytest.raises(ValueError, match="reward_pool.overrides=\\[name=vlm\\]"):
        parse_config([*base, "environment.skyrl_gym.skyrl_rewards.pool=vlm"])
    cfg = parse_config(
        [*base, "environment.skyrl_gym.skyrl_rewards.pool=vlm", "reward_pool.overrides=[name=vlm]"]
    )
    assert cfg.reward_pool.overrides == ["name=vlm"]
