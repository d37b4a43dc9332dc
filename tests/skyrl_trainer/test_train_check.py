"""``python -m skyrl_rewards.train --check`` catches what a run would trip on first (issue 43:
it said ``config OK`` for ``trainer.epochs=abc`` and for a parquet that does not exist)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from skyrl_rewards.train.check import check, env_problems, file_problems, type_problems
from skyrl_rewards.train.config import TrainConfig
from skyrl_rewards.train.entrypoint import reward_pool_config

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
POOL = [
    "environment.env_class=skyrl_rewards",
    "environment.skyrl_gym.skyrl_rewards.pool=vlm_rewards",
    "reward_pool.config=configs/pool.yaml",
    "reward_pool.rewards=configs/rec.yaml",
    "reward_pool.overrides=[name=vlm_rewards]",
]


@pytest.fixture(scope="module")
def parquet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("rec")
    subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "data" / "prepare_skyrl_data.py")]
        + ["--input", str(SAMPLE / "rec.jsonl"), "--out-dir", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return out


def test_the_defaults_and_the_launch_settings_have_no_type_problem() -> None:
    assert type_problems(TrainConfig.from_cli_overrides([])) == []
    launch = [
        "trainer.train_batch_size=64",
        "trainer.policy.optimizer_config.lr=1.0e-6",
        "generator.sampling_params.temperature=1",
        "generator.n_samples_per_prompt=8",
        "trainer.placement.colocate_all=true",
    ]
    assert type_problems(TrainConfig.from_cli_overrides(launch)) == []


def test_a_value_of_the_wrong_type_is_named() -> None:
    cfg = TrainConfig.from_cli_overrides(["trainer.epochs=abc", "trainer.train_batch_size=1.5"])
    assert type_problems(cfg) == [
        "trainer.epochs: expected int, got 'abc' (str)",
        "trainer.train_batch_size: expected int, got 1.5 (float)",
    ]


def test_every_file_the_config_names_is_looked_at(parquet: Path, tmp_path: Path) -> None:
    no_prompt = tmp_path / "no_prompt.parquet"
    pq.write_table(pa.table({"question": ["x"], "env_class": ["skyrl_rewards"]}), no_prompt)
    cfg = TrainConfig.from_cli_overrides(
        [
            f"data.train_data=['{tmp_path / 'missing.parquet'}','{no_prompt}']",
            f"data.val_data=['{parquet / 'validation.parquet'}']",
            "trainer.policy.model.path=/no/such/model",
            "reward_pool.config=configs/nope.yaml",
        ]
    )
    problems = file_problems(cfg)
    assert problems[0] == (
        f"data.train_data: {tmp_path / 'missing.parquet'}: no such file; write it with "
        "scripts/data/prepare_skyrl_data.py, or fix the path"
    )
    assert problems[1].startswith(f"data.train_data: {no_prompt}: no column 'prompt'")
    assert problems[2] == "trainer.policy.model.path: /no/such/model: no such folder"
    assert problems[3].startswith("reward_pool.config: configs/nope.yaml: no such config file")
    assert len(problems) == 4
    # val_data is read only when SkyRL evaluates
    cfg = TrainConfig.from_cli_overrides(["data.val_data=['/nope.parquet']"])
    assert any(p.startswith("data.val_data: /nope.parquet") for p in file_problems(cfg))
    cfg = TrainConfig.from_cli_overrides(
        ["data.val_data=['/nope.parquet']", "trainer.eval_interval=0"]
    )
    assert not any(p.startswith("data.val_data") for p in file_problems(cfg))


def test_each_env_section_goes_through_the_envs_own_validation(parquet: Path) -> None:
    cfg = TrainConfig.from_cli_overrides(
        [
            f"data.train_data=['{parquet / 'train.parquet'}']",  # its rows: env_class skyrl_rewards
            "environment.env_class=tau_bench_env",  # and skyrl_rewards, from the rows
            "environment.skyrl_gym.skyrl_rewards.in_process=true",
            "environment.skyrl_gym.skyrl_rewards.rewards={iou: {box_format: qwen9}}",
        ]
    )
    [problem] = env_problems(cfg)
    assert problem.startswith("environment.skyrl_gym.skyrl_rewards: rewards.iou: box_format")
    assert "did you mean 'qwen3_vl'" in problem


def test_the_readme_command_passes_every_phase(parquet: Path) -> None:
    said: list[str] = []
    cfg, problems = check(
        [
            f"data.train_data=['{parquet / 'train.parquet'}']",
            f"data.val_data=['{parquet / 'validation.parquet'}']",
            *POOL,
            "generator.vision_language_generator=true",
        ],
        reward_pool_config,
        say=said.append,
    )
    assert problems == 0, said
    phases = [line.split(":")[1].strip() for line in said if line.startswith("check: ")]
    assert phases == ["config", "config", "types", "skyrl", "files", "envs", "pool"]
    assert [line for line in said if line.startswith("note: ")][0].startswith(
        "note: data.train_data holds"
    )  # 20-odd sample rows, fewer than SkyRL's default batch: said, not refused


def test_check_exits_2_listing_every_problem(tmp_path: Path) -> None:
    """The issue's two cases in one command: each named, exit 2, no ``config OK``."""
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", "--check", "trainer.epochs=abc"]
        + [f"data.train_data=['{tmp_path / 'train.parquet'}']", "trainer.eval_interval=0"],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr[-2000:]
    assert "config OK" not in done.stdout
    assert "check: types: 1 problem" in done.stdout  # the phases on stdout, problems on stderr
    assert "  trainer.epochs: expected int, got 'abc' (str)" in done.stderr
    assert f"  data.train_data: {tmp_path / 'train.parquet'}: no such file" in done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        "python -m skyrl_rewards.train: config error: 2 problems (listed above); fix them and "
        "check again"
    )
