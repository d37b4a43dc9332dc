"""One real SkyRL 0.4 training step on CPU, through this project's experiment, per env.

Each case runs ``cpu_training_step.py`` (its docstring says what it does; ``stand_ins.py``
what is stood in for: the GPU parts only) in its own process, samples the memory of that
process tree, and asserts on the step's summary: rewards from the pool (or the tau-bench
env), advantages, masking down to the gradient, the optimizer step and the weight sync,
and the step's metrics; for the vision-language policies (REC: Qwen2.5-VL, Qwen3-VL) also
that the images reached the policy's forward. The summary is printed (``pytest -s``) for
the record.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def tree_rss_bytes(process: psutil.Process) -> int:
    """Resident memory of ``process`` and all its descendants (Ray's workers included)."""
    total = 0
    for p in [process, *process.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            pass
    return total


def run_step(
    task: str, out: Path, script: str = "cpu_training_step.py"
) -> tuple[dict[str, Any], float, int]:
    """The run's summary (``script TASK OUT``), its wall seconds and the peak RSS of its
    process tree."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / script), task, str(out)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        parent = psutil.Process(proc.pid)
        while not done.wait(0.5):
            try:
                peak = max(peak, tree_rss_bytes(parent))
            except psutil.Error:
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        output, _ = proc.communicate(timeout=900)
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    wall = time.perf_counter() - started
    assert proc.returncode == 0, output[-6000:]
    return json.loads((out / "summary.json").read_text()), wall, peak


def report(summary: dict[str, Any], wall: float, peak: int) -> None:
    record = {**summary, "wall_s": round(wall, 1), "peak_rss_gib": round(peak / 2**30, 2)}
    sys.stdout.write(f"\nSTEP SUMMARY {json.dumps(record)}\n")


def check_weights(summary: dict[str, Any]) -> None:
    weights = summary["weights"]
    # the first sync (before the step) hands over the initial policy; the last, the stepped one
    assert weights["engine_syncs"][0] == weights["initial"]
    assert weights["engine_syncs"][-1] != weights["initial"]  # the optimizer step moved them
    # the engine holds what SkyRL's own HF export of the policy holds
    assert weights["engine_now"] == weights["engine_syncs"][-1]
    assert weights["policy_export_after_step"] == weights["engine_now"]


def check_metrics(summary: dict[str, Any]) -> None:
    metrics = summary["metrics"]
    assert "generate/masked_share" in metrics
    assert 0.0 < metrics["timing/reward_share"] < 1.0
    assert metrics["generate/env_step_wall_s"] > 0.0


@pytest.mark.timeout(1000)
def test_one_grpo_step_on_math_with_the_reward_pool(tmp_path: Path) -> None:
    summary, wall, peak = run_step("math", tmp_path)
    report(summary, wall, peak)
    by_id = dict(zip(summary["trajectories"], summary["rewards"], strict=True))
    masked = dict(zip(summary["trajectories"], summary["masked"], strict=True))
    # the rows' own answers: format 1 + accuracy 1 from the pool (configs/math.yaml)
    assert by_id["0_0"] == 2.0 and by_id["1_0"] == 2.0
    # the third row names an unknown accuracy method: a dataset error, masked, imputed 0.0
    assert masked["2_0"] and masked["2_1"] and by_id["2_0"] == by_id["2_1"] == 0.0
    assert not any(masked[t] for t in ("0_0", "0_1", "1_0", "1_1"))
    # every trajectory went through the pool: 6 samples x 2 rewards (accuracy, format)
    assert summary["pool_tasks"] == 12
    assert summary["engine_generated"] == {"scripted": 3, "sampled": 3}
    advantages = dict(
        zip(summary["trajectories"], summary["advantages_first_and_absmax"], strict=True)
    )
    for t in ("0_0", "1_0"):  # judged groups: the gold answer above its sampled sibling
        assert advantages[t][0] > 0.0 and advantages[t.replace("_0", "_1")][0] < 0.0
    assert advantages["2_0"] == advantages["2_1"] == [0.0, 0.0]
    loss_tokens = dict(zip(summary["trajectories"], summary["loss_tokens"], strict=True))
    assert loss_tokens["2_0"] == loss_tokens["2_1"] == 0
    gradient = summary["masked_rows_gradient"]
    assert gradient["masked_loss"] == 0.0 and gradient["masked_grad_norm"] == 0.0
    assert gradient["unmasked_grad_norm"] > 0.0  # the same rows with their tokens counted
    assert summary["metrics"]["generate/masked_share"] == pytest.approx(2 / 6)
    check_weights(summary)
    check_metrics(summary)


@pytest.mark.timeout(1000)
def test_one_grpo_step_on_tau_retail_with_gold_and_bad_scripts(tmp_path: Path) -> None:
    summary, wall, peak = run_step("tau", tmp_path)
    report(summary, wall, peak)
    by_id = dict(zip(summary["trajectories"], summary["rewards"], strict=True))
    assert by_id == {"0_0": 1.0, "0_1": 0.0, "1_0": 1.0, "1_1": 0.0}
    assert not any(summary["masked"])
    advantages = dict(
        zip(summary["trajectories"], summary["advantages_first_and_absmax"], strict=True)
    )
    for task in ("0", "1"):
        assert advantages[f"{task}_0"][0] > 0.0 > advantages[f"{task}_1"][0]
    assert summary["metrics"]["generate/masked_share"] == 0.0
    check_weights(summary)
    check_metrics(summary)


@pytest.mark.timeout(1000)
@pytest.mark.parametrize(
    ("task", "exact_gold"),
    [
        # Qwen2.5-VL, boxes in pixels of the resized input: the rows' 224x168 images need no
        # resize (whole 28-pixel multiples under the engine's max_pixels), so the gold box in
        # resized pixels is the ground truth exactly: iou 1.0 + format 1.0
        ("rec", True),
        # Qwen3-VL, boxes on the 0-1000 grid: round(x * 1000 / W) moves each side by up to
        # W / 2000 pixels, so the gold box scores the IoU of its round trip (about 0.996)
        ("rec_qwen3", False),
    ],
)
def test_one_grpo_step_on_rec_with_a_vision_language_policy(
    task: str, exact_gold: bool, tmp_path: Path
) -> None:
    summary, wall, peak = run_step(task, tmp_path)
    report(summary, wall, peak)
    by_id = dict(zip(summary["trajectories"], summary["rewards"], strict=True))
    masked = dict(zip(summary["trajectories"], summary["masked"], strict=True))
    for trajectory, gold in summary["gold"].items():  # the pool's iou + format_rec
        assert by_id[trajectory] == pytest.approx(1.0 + gold["iou"], abs=1e-4)
        assert gold["iou"] == 1.0 if exact_gold else 0.99 < gold["iou"] < 1.0
    if exact_gold:
        assert by_id["0_0"] == by_id["1_0"] == 2.0
    # a wrong box in the right format: format 1.0, iou 0.0; the engine's samples: neither
    assert by_id["0_1"] == by_id["1_1"] == 1.0
    assert by_id["0_2"] == by_id["1_2"] == 0.0
    # the third row's solution is malformed: a dataset error, masked, imputed 0.0
    assert all(masked[f"2_{k}"] and by_id[f"2_{k}"] == 0.0 for k in range(3))
    assert not any(masked[f"{n}_{k}"] for n in range(2) for k in range(3))
    assert summary["pool_tasks"] == 18  # 9 samples x 2 rewards (iou, format_rec)
    assert summary["engine_generated"] == {"scripted": 6, "sampled": 3}
    advantages = dict(
        zip(summary["trajectories"], summary["advantages_first_and_absmax"], strict=True)
    )
    for n in range(2):  # gold above the wrong box above the sample
        gold, wrong, sampled = (advantages[f"{n}_{k}"][0] for k in range(3))
        assert gold > 0.0 > sampled and gold > wrong > sampled
    loss_tokens = dict(zip(summary["trajectories"], summary["loss_tokens"], strict=True))
    assert all(advantages[f"2_{k}"] == [0.0, 0.0] and loss_tokens[f"2_{k}"] == 0 for k in range(3))
    gradient = summary["masked_rows_gradient"]
    assert gradient["masked_loss"] == 0.0 and gradient["masked_grad_norm"] == 0.0
    assert gradient["unmasked_grad_norm"] > 0.0
    # the images reached the policy: every row of the training batch carries its image's
    # pixel rows and grid (TensorLists), as many image tokens as the grid's merged patches,
    # and the policy's logprobs move when those pixels are zeroed
    vision = summary["vision"]
    assert vision["fields"] == ["TensorList", "TensorList"]
    assert len(vision["pixel_rows"]) == len(summary["trajectories"])
    for rows, grids, tokens in zip(
        vision["pixel_rows"], vision["image_grid_thw"], vision["image_tokens"], strict=True
    ):
        ((t, h, w),) = grids
        assert rows[0] == t * h * w and tokens == t * h * w // 4
    assert vision["logprob_shift_when_pixels_zeroed"] > 0.0
    assert vision["engine_rendered_images"] >= len(summary["trajectories"])
    assert summary["metrics"]["generate/masked_share"] == pytest.approx(1 / 3)
    check_weights(summary)
    check_metrics(summary)
