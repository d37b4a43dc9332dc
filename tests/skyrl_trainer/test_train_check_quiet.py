"""``python -m skyrl_rewards.train --check`` on a machine without a GPU: the config summary and
``config OK``, not the notices importing vLLM, torch and SkyRL print about the missing GPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
GPU_NOTICES = ("Triton", "CUDA", "vllm._C", "DeepSelect", "libcuda", "patch")
"""What the notices said (issue 34: five to seven lines before ``config OK``)."""


def _check(*overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", "--check", *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_check_prints_no_gpu_notices(tmp_path: Path) -> None:
    prepared = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "data" / "prepare_skyrl_data.py")]
        + ["--input", str(SAMPLE / "rec.jsonl"), "--out-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert prepared.returncode == 0, prepared.stderr[-3000:]
    done = _check(
        f"data.train_data=['{tmp_path / 'train.parquet'}']",
        "environment.env_class=skyrl_rewards",
        "reward_pool.config=configs/pool.yaml",
        "reward_pool.rewards=configs/rec.yaml",
        "generator.vision_language_generator=true",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.endswith("config OK\n")
    assert [line for line in done.stderr.splitlines() if any(n in line for n in GPU_NOTICES)] == []
    # errors still show: a config SkyRL refuses is said as before
    refused = _check("environment.skyrl_gym.on_env_error=ignore")
    assert refused.returncode == 2
    assert "python -m skyrl_rewards.train: config error:" in refused.stderr
    assert "on_env_error" in refused.stderr
