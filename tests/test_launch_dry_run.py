"""The SkyRL launch scripts' dry runs: configs load, data converts, the envs build and step."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from skyrl_rewards.train.launch import env_overrides, skyrl_record

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"


def run_script(
    script: str, *args: str, data_dir: Path, timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT), DATA_DIR=str(data_dir))
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def test_rec_dry_run_builds_and_steps_the_envs_through_the_pool(tmp_path: Path) -> None:
    proc = run_script("launch_grpo_rec.sh", "--dry-run", "trainer.epochs=1", data_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "environment.env_class=skyrl_rewards" in out
    assert "+environment.skyrl_gym.skyrl_rewards.pool=skyrl_rewards_pool" in out
    assert (
        out.rstrip().splitlines()[-2]
        == "built 24 skyrl_rewards envs through skyrl_gym.make; stepped 24"
    )
    assert "trainer.epochs=1" in out  # extra arguments reach SkyRL
    assert ", 0 to mask" in out
    train, val = (
        pq.read_table(tmp_path / "train.parquet"),
        pq.read_table(tmp_path / "validation.parquet"),
    )
    assert (train.num_rows, val.num_rows) == (18, 6)
    row = train.to_pylist()[0]
    assert row["env_class"] == "skyrl_rewards"
    assert row["reward_spec"]["method"] == "rule" and row["reward_spec"]["ground_truth"].startswith(
        "<answer>["
    )
    assert Path(row["image_path"]).is_absolute() and Path(row["image_path"]).exists()
    image_part, text_part = row["prompt"][0]["content"]
    assert image_part["image_url"]["url"].startswith("data:image/png;base64,")
    assert text_part["text"].startswith("Please provide the bounding box")
    assert text_part["text"].endswith("in <answer> </answer> tags.")  # VLM-R1's instruction


def test_tau_retail_dry_run_builds_the_envs_from_the_task_parquet(tmp_path: Path) -> None:
    proc = run_script(
        "launch_grpo_tau_retail.sh", "--dry-run", "--", "generator.max_turns=12", data_dir=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "environment.env_class=tau_bench" in out
    assert "+environment.skyrl_gym.tau_bench.domain=retail" in out
    # a setting given on the command line reaches SkyRL once, with its value
    assert out.count("+environment.skyrl_gym.tau_bench.backend=") == 1
    assert "+environment.skyrl_gym.tau_bench.user.model=Qwen/Qwen2.5-32B-Instruct" in out
    assert "generator.max_turns=12" in out and "generator.max_turns=30" not in out
    assert f"data.val_data=['{tmp_path / 'test.parquet'}']" in out
    assert (
        out.rstrip().splitlines()[-1] == "built 32 tau_bench envs through skyrl_gym.make; stepped 0"
    )
    assert pq.read_table(tmp_path / "train.parquet").num_rows > 32


@pytest.mark.parametrize(
    ("snippet", "expected"),
    [
        (  # the env's settings become +environment.skyrl_gym.<env> overrides, nested keys flattened
            {
                "environment": {
                    "env_class": "skyrl_rewards",
                    "skyrl_gym": {
                        "skyrl_rewards": {"in_process": True, "rewards": {"iou": {"weight": 1.0}}}
                    },
                }
            },
            [
                "environment.env_class=skyrl_rewards",
                "+environment.skyrl_gym.skyrl_rewards.in_process=true",
                "+environment.skyrl_gym.skyrl_rewards.rewards.iou.weight=1.0",
            ],
        ),
        (  # other top-level settings pass through as plain overrides; odd strings are quoted
            {
                "environment": {"env_class": "tau_bench"},
                "generator": {"max_turns": 30, "stop": "a b"},
            },
            ["environment.env_class=tau_bench", "generator.max_turns=30", 'generator.stop="a b"'],
        ),
    ],
)
def test_env_overrides(snippet: dict, expected: list[str]) -> None:
    assert env_overrides(OmegaConf.create(snippet)) == expected


def test_env_config_without_env_class_is_rejected() -> None:
    with pytest.raises(ValueError, match="environment.env_class"):
        env_overrides(OmegaConf.create({"environment": {"skyrl_gym": {}}}))


def test_record_without_problem_names_the_row() -> None:
    with pytest.raises(ValueError, match=r"row 3 \(id x\): missing field 'problem'"):
        skyrl_record({"id": "x", "solution": "1"}, 3, SAMPLE, "skyrl_rewards", "math")
