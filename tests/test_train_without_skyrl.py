"""``python -m skyrl_rewards.train`` in a venv without SkyRL (the README's main, Python 3.11 one)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is not None, reason="SkyRL is installed")
@pytest.mark.parametrize("args", [["--help"], ["--check", "trainer.epochs=1"], []])
def test_without_skyrl_one_line_says_what_to_install(args: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.train", *args],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == "" and "Traceback" not in done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("python -m skyrl_rewards.train: needs SkyRL 0.4 on Python 3.12")
    install = line.split("(as the README says): ")[1]
    assert install in (ROOT / "README.md").read_text()  # the README's own command


@pytest.mark.skipif(importlib.util.find_spec("skyrl") is not None, reason="SkyRL is installed")
@pytest.mark.parametrize("script", ["launch_grpo_rec.sh", "launch_grpo_tau_retail.sh"])
def test_a_launch_script_without_the_venv_says_how_to_build_it(script: str, tmp_path) -> None:
    """Issue 43: run with a Python without SkyRL, the scripts failed with a raw traceback."""
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch" / script), "--check"],
        env=dict(os.environ, PYTHON=sys.executable, DATA_DIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr and not list(tmp_path.iterdir())  # nothing prepared
    assert done.stderr.splitlines() == [
        f"{script}: {sys.executable} ({sys.executable}) has no SkyRL 0.4; build its venv and "
        "use it:",
        "  bash scripts/launch/make_skyrl_venv.sh && . .venv-skyrl/bin/activate   "
        "(or PYTHON=.venv-skyrl/bin/python)",
    ]
