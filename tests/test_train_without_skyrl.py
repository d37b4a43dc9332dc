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
