"""SkyRL 0.4's fully-async trainer through this project's entry point.

The config check (SkyRL's parser and its ``FullyAsyncRayPPOTrainer``'s own assertions, in
their words), the launch script's ``--check``, how masked groups meet SkyRL's zero-variance
rule, and real fully-async training on CPU (``cpu_fully_async_step.py``: its docstring says
what runs) asserted from what ran: groups in flight at once, staleness, rewards from the pool
and the tau env, masked trajectories with no loss tokens and no gradient, a failing user
simulator and a failing env ending trajectories, never the run, and the weight syncs reaching
the engine between a pause and a resume.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from skyrl.train.fully_async_trainer import GeneratedOutputGroup
from test_skyrl_training_step import report, run_step

from skyrl_rewards.train.entrypoint import main, parse_config
from skyrl_rewards.train.fully_async import RewardsFullyAsyncTrainer, config_only_trainer

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

FULLY_ASYNC = [
    "trainer.fully_async.enabled=true",
    "trainer.placement.colocate_all=false",
    "trainer.train_batch_size=4",
    "trainer.policy_mini_batch_size=4",
    "trainer.fully_async.max_staleness_steps=1",
    "trainer.fully_async.num_parallel_generation_workers=8",
    "trainer.algorithm.policy_loss_type=rollout_is",
    "trainer.logger=console",
]


@pytest.fixture(scope="module")
def train_data(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``data.train_data=[...]``: a one-row parquet of SkyRL's default env, so that ``--check``'s
    files phase (which opens every file the config names) passes; no validation set is read."""
    path = tmp_path_factory.mktemp("data") / "train.parquet"
    prompt = [{"role": "user", "content": "What is 2 + 2?"}]
    pq.write_table(pa.table({"prompt": [prompt], "env_class": ["gsm8k"]}), path)
    return f"data.train_data=['{path}']"


def test_a_fully_async_config_checks(capsys: pytest.CaptureFixture[str], train_data: str) -> None:
    assert main(["--check", *FULLY_ASYNC, train_data, "trainer.eval_interval=0"]) == 0
    out = capsys.readouterr().out
    assert "trainer: fully async (workers=8, max_staleness_steps=1" in out
    assert "config OK" in out


@pytest.mark.parametrize(
    ("override", "reason"),
    [
        # SkyRL's FullyAsyncRayPPOTrainer asserts, word for word
        ("trainer.placement.colocate_all=true", "colocate_all is not supported for async training"),
        ("generator.batched=true", "batched is not supported for fully async training"),
        ("trainer.algorithm.policy_loss_type=regular", "Fully async training should use rollout"),
        ("trainer.fully_async.num_parallel_generation_workers=9", "Invalid num_parallel_gen"),
        ("trainer.train_batch_size=8", "train_batch_size must equal policy_mini_batch_size"),
        ("trainer.fully_async.sample_full_batch=true", "requires trainer.algorithm.zero_variance"),
        # what the trainer leaves to the first training step
        ("generator.sampling_params.logprobs=null", "set generator.sampling_params.logprobs=0"),
    ],
)
def test_a_config_the_trainer_refuses_fails_the_check_with_its_reason(
    override: str, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--check", *FULLY_ASYNC, override]) == 2
    err = capsys.readouterr().err
    assert "config error:" in err and reason in err
    assert "Traceback" not in err


def test_the_fully_async_launch_script_checks_on_cpu(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path))
    script = ROOT / "scripts" / "launch" / "launch_fully_async_tau_retail.sh"
    out = subprocess.run(
        ["bash", str(script), "--check"], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "trainer: fully async (workers=128, max_staleness_steps=4" in out.stdout
    assert "config OK" in out.stdout and (tmp_path / "train.parquet").is_file()


def group(rewards: list[float], loss_masks: list[list[int]], masked: list[bool]) -> Any:
    output = {
        "rewards": rewards,
        "loss_masks": loss_masks,
        "env_metrics": [{"should_mask": float(m)} for m in masked],
    }
    return GeneratedOutputGroup(generator_output=output, uid="0", global_step_when_scheduled=1)


@pytest.mark.parametrize(
    ("rewards", "loss_masks", "masked", "kept"),
    [
        ([1.0, 0.0, 0.5], [[1], [1], [0]], [False, False, True], True),  # spread: trained
        ([1.0, 1.0, 1.0], [[1], [1], [0]], [False, False, True], False),  # SkyRL: no spread
        # one live trajectory: SkyRL keeps it; its advantage is zero with the imputed mean
        ([1.0, 1.0, 1.0], [[1], [0], [0]], [False, True, True], False),
        ([0.0, 0.0], [[0], [0]], [True, True], False),  # nothing live
    ],
)
def test_masked_trajectories_and_zero_variance_filtering_agree(
    rewards: list[float], loss_masks: list[list[int]], masked: list[bool], kept: bool
) -> None:
    trainer = config_only_trainer(
        parse_config([*FULLY_ASYNC, "trainer.algorithm.zero_variance_filter=true"])
    )
    assert isinstance(trainer, RewardsFullyAsyncTrainer)
    assert trainer._should_keep_group(group(rewards, loss_masks, masked)) is kept


def compact(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary to print: groups without their metrics, no logs or engine events."""
    groups = [{k: v for k, v in g.items() if k != "metrics"} for g in summary["groups"]]
    rest = {k: v for k, v in summary.items() if k not in ("logs", "engine", "groups")}
    return {**rest, "groups": groups}


def overlapping(groups: list[dict[str, Any]]) -> int:
    """The most groups in flight at one moment, from their start and end times."""
    edges = sorted([(g["start"], 1) for g in groups] + [(g["end"], -1) for g in groups])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def sync_brackets(events: list[list[Any]]) -> list[list[str]]:
    """The engine's events from each pause to its resume (kind only)."""
    brackets, current = [], None
    for event in events:
        if event[0] == "pause":
            current = []
        elif event[0] == "resume":
            brackets.append(current)
            current = None
        elif current is not None:
            current.append(event[0])
    return brackets


def by_trajectory(groups: list[dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """Trajectory id -> (reward, masked, loss tokens, stop reason), from the summary's groups."""
    return {
        t: (r, m, n, s)
        for g in groups
        for t, r, m, n, s in zip(
            g["trajectories"],
            g["rewards"],
            g["masked"],
            g["loss_tokens"],
            g["stop_reasons"],
            strict=True,
        )
    }


@pytest.mark.timeout(1500)
def test_fully_async_training_on_tau_retail_and_math(tmp_path: Path) -> None:
    summary, wall, peak = run_step("text", tmp_path, script="cpu_fully_async_step.py")
    assert summary["user_endpoint"]["calls"] > 0  # the user simulator was the endpoint
    report(compact(summary), wall, peak)
    groups = {g["uid"]: g for g in summary["groups"]}
    assert sorted(groups) == [str(i) for i in range(6)]  # every group generated once
    by_id = by_trajectory(summary["groups"])
    # several groups in flight at once; SkyRL's four workers, one group each
    assert 2 <= overlapping(summary["groups"]) <= 4
    # each concurrent generate() call timed its own env steps (the refused task had none)
    for g in summary["groups"]:
        env_s = g["metrics"]["generate/env_step_wall_s"]
        assert (env_s == 0.0) if g["uid"] == "2" else (0.0 < env_s <= g["end"] - g["start"])
    # tau retail, the user a model behind a real chat endpoint: gold 1.0, goodbye 0.0
    assert by_id["0_0"][:2] == (1.0, False) and by_id["0_1"][:2] == (0.0, False)
    # task 1: the user endpoint failed the goodbye (one 500, counted there): masked, imputed
    assert summary["user_endpoint"]["errors"] == 1
    assert by_id["1_0"][:2] == (1.0, False)
    assert by_id["1_1"][1] and by_id["1_1"][2] == 0 and by_id["1_1"][0] == 1.0
    # task 2: the env refused its row; both trajectories are SkyRL's rollout_error placeholder
    for t in ("2_0", "2_1"):
        reward, masked, loss_tokens, stop = by_id[t]
        assert masked and loss_tokens == 0 and stop == "rollout_error" and reward == 0.0
    assert groups["2"]["metrics"]["generate/env_errors"] == 2.0
    # math from the reward pool: the row's answer 2.0 (format + accuracy); the third row masked
    assert by_id["3_0"][:2] == (2.0, False) and by_id["4_0"][:2] == (2.0, False)
    assert by_id["5_0"][1] and by_id["5_1"][1]
    assert summary["pool_tasks"] == 12  # 6 math samples x 2 rewards, counted at the pool
    # three steps, two groups each, every group trained once
    steps = summary["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert sorted(u for s in steps for u in s["uids"]) == sorted(groups)
    check_staleness(summary, mini_batch=2)
    logged = [log for log in summary["logs"] if "async/staleness_max" in log]
    masked_by_step = [
        sum(groups[u]["masked"].count(True) for u in s["uids"]) / (2 * len(s["uids"]))
        for s in steps
    ]  # the mini-batch's share, not SkyRL's sum of its groups' shares
    assert [log["generate/masked_share"] for log in logged] == pytest.approx(masked_by_step)
    # the masked trajectories reached the loss with no tokens, and give no gradient
    masked_rows = sum(tokens == 0 for batch in summary["batch_loss_tokens"] for tokens in batch)
    assert masked_rows == 5  # 1_1, 2_0, 2_1, 5_0, 5_1
    gradient = summary["masked_rows_gradient"]
    assert gradient["masked_loss"] == 0.0 and gradient["masked_grad_norm"] == 0.0
    assert gradient["unmasked_grad_norm"] > 0.0
    check_weight_syncs(summary, 3)
    # generation went on between syncs: some group generated on weights of a later step
    versions = {e[2] for e in summary["engine"]["events"] if e[0] == "generate"}
    assert max(versions) >= 2


def check_staleness(summary: dict[str, Any], mini_batch: int, max_staleness: int = 1) -> None:
    """SkyRL's staleness control as it documents it: a group starts only while fewer than
    ``(max_staleness + step) * mini_batch`` groups are accepted or running, so at most
    ``(max_staleness + 1) * mini_batch`` start before step 1 trains and the rest wait for a
    slot; a group that still ends up staler (a long episode) is trained on and counted in
    ``async/staleness_violation_count``."""
    scheduled = [g["scheduled_step"] for g in summary["groups"]]
    assert scheduled.count(1) == (max_staleness + 1) * mini_batch  # every slot taken at once
    assert max(scheduled) >= 2  # the others waited for step 1
    logged = [log for log in summary["logs"] if "async/staleness_max" in log]
    assert len(logged) == len(summary["steps"])
    for step, log in zip(summary["steps"], logged, strict=True):
        stale = [s for s in step["staleness"] if s > max_staleness]
        assert log["async/staleness_violation_count"] == len(stale)
        assert log["async/staleness_max"] == max(step["staleness"])


def check_weight_syncs(summary: dict[str, Any], steps: int) -> None:
    """The initial policy, then one sync per step, each between a pause and a resume with no
    generation in between; the engine ends with what the policy exports."""
    weights = summary["weights"]
    assert len(weights["engine_syncs"]) == steps + 1
    assert weights["engine_syncs"][0] == weights["initial"] != weights["engine_syncs"][-1]
    assert weights["engine_now"] == weights["policy_export_after_training"]
    assert weights["engine_now"] == weights["engine_syncs"][-1]
    assert sync_brackets(summary["engine"]["events"]) == [["load"]] * (steps + 1)


@pytest.mark.timeout(1500)
def test_fully_async_training_on_rec_with_a_qwen3_vl_policy(tmp_path: Path) -> None:
    summary, wall, peak = run_step("rec_qwen3", tmp_path, script="cpu_fully_async_step.py")
    report(compact(summary), wall, peak)
    assert sorted(g["uid"] for g in summary["groups"]) == ["0", "1", "2"]
    assert overlapping(summary["groups"]) == 2  # SkyRL's two workers, one group each
    groups = {g["uid"]: g for g in summary["groups"]}
    by_id = by_trajectory(summary["groups"])
    for trajectory, gold in summary["gold"].items():  # the pool's iou + format_rec
        assert by_id[trajectory][0] == pytest.approx(1.0 + gold["iou"], abs=1e-4)
    assert by_id["0_1"][0] == by_id["1_1"][0] == 1.0  # a wrong box in the right format
    assert all(by_id[f"2_{k}"][1] and by_id[f"2_{k}"][2] == 0 for k in range(3))
    # 0_2's response held <|image_pad|>: the generator's guard ended it as SkyRL's rollout_error
    # placeholder (the policy forward would have failed the step on it), its reward the group's
    # judged mean; the run went on
    reward, masked, loss_tokens, stop = by_id["0_2"]
    assert masked and loss_tokens == 0 and stop == "rollout_error"
    assert reward == pytest.approx((by_id["0_0"][0] + by_id["0_1"][0]) / 2)
    assert groups["0"]["metrics"]["generate/env_errors"] == 1.0
    assert any(
        "ImagePlaceholderInResponseError: the response holds 1 image placeholder" in warning
        for warning in summary["generator_warnings"]
    ), summary["generator_warnings"]
    assert summary["pool_tasks"] == 18  # 9 samples x 2 rewards, counted at the pool
    steps = summary["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    check_staleness(summary, mini_batch=1)
    # every trained row carried its image: pixel rows per row of each step's batch
    assert [len(rows) for rows in summary["batch_image_rows"]] == [3, 3, 3]
    assert summary["engine"]["rendered_images"] >= 9
    masked_rows = sum(tokens == 0 for batch in summary["batch_loss_tokens"] for tokens in batch)
    assert masked_rows == 4  # 0_2, 2_0, 2_1, 2_2
    gradient = summary["masked_rows_gradient"]
    assert gradient["masked_loss"] == 0.0 and gradient["masked_grad_norm"] == 0.0
    assert gradient["unmasked_grad_norm"] > 0.0
    check_weight_syncs(summary, 3)
