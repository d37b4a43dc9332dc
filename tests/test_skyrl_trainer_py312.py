"""Runs tests/skyrl_trainer (the envs inside the real SkyRL 0.4) in a Python 3.12 venv.

SkyRL 0.4 needs Python >= 3.12 and vLLM (its config imports it), which the
main test venv need not have. ``scripts/launch/make_skyrl_venv.sh`` builds
``.venv-skyrl`` once (rebuilt when pyproject.toml changes); this test then runs
pytest on tests/skyrl_trainer inside it and fails with that run's output.
Without a Python 3.12 the test skips, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-skyrl"
STAMP = VENV / "skyrl-rewards-pyproject.sha256"
BUILD_TIMEOUT_S = 3000


def python312_available() -> bool:
    """Whether scripts/launch/make_skyrl_venv.sh finds a Python 3.12 (it says which, or fails)."""
    probe = subprocess.run(
        ["bash", str(ROOT / "scripts" / "launch" / "make_skyrl_venv.sh"), "--which-python"],
        capture_output=True,
        check=False,
        timeout=60,
    )
    return probe.returncode == 0


def ensure_venv(capsys: pytest.CaptureFixture[str]) -> Path:
    """``.venv-skyrl/bin/python``, building the venv when missing or built for another pyproject.

    A build takes minutes and about 9 GB: its stages and pip's lines go to the terminal as
    they come (pytest's capture is lifted for it), and its last lines into the failure.
    """
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    python = VENV / "bin" / "python"
    if not (python.exists() and STAMP.exists() and STAMP.read_text() == digest):
        tail: deque[str] = deque(maxlen=200)
        with capsys.disabled():
            sys.stdout.write(
                f"\nbuilding {VENV} for the SkyRL tests (scripts/launch/make_skyrl_venv.sh):\n"
            )
            build = subprocess.Popen(
                ["bash", str(ROOT / "scripts" / "launch" / "make_skyrl_venv.sh")],
                cwd=ROOT,
                env={**os.environ, "VENV": str(VENV)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,  # pip and its children go with it on a hang
            )
            assert build.stdout is not None
            watchdog = threading.Timer(BUILD_TIMEOUT_S, os.killpg, (build.pid, signal.SIGKILL))
            watchdog.start()
            try:
                for line in build.stdout:
                    tail.append(line)
                    sys.stdout.write(f"  {line}")
                    sys.stdout.flush()
                returncode = build.wait(timeout=60)
            finally:
                watchdog.cancel()
        assert returncode == 0, f"building {VENV} failed:\n{''.join(tail)[-5000:]}"
        STAMP.write_text(digest)
    return python


@pytest.mark.slow
@pytest.mark.timeout(4800)
def test_envs_inside_the_real_skyrl_on_python312(capsys: pytest.CaptureFixture[str]) -> None:
    if not python312_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs Python 3.12 for the SkyRL tests (set PYTHON312 or install it)")
        pytest.skip("no Python 3.12 (SkyRL 0.4 needs it): set PYTHON312 to run the SkyRL tests")
    python = ensure_venv(capsys)
    run = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/skyrl_trainer"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2700,  # the two CPU training steps add about 6 min on 2 cores
    )
    sys.stdout.write(run.stdout[-4000:])  # shown with -rA or on failure
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    assert " passed" in run.stdout.splitlines()[-1]
