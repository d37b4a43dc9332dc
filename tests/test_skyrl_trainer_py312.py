"""Runs tests/skyrl_trainer (the envs inside the real SkyRL 0.4) in a Python 3.12 venv.

With them it runs :data:`VLLM_PROTOCOL_TESTS`: the served reward model and the
judge against vLLM's own routes, request and response classes, which need
the vLLM that venv has.

SkyRL 0.4 needs Python >= 3.12 and vLLM (its config imports it), which the
main test venv need not have. ``scripts/launch/make_skyrl_venv.sh`` builds
``.venv-skyrl`` once (rebuilt when pyproject.toml changes); this test then runs
pytest on tests/skyrl_trainer inside it and fails with that run's output.
Without a Python 3.12 the test skips, except in CI (``CI=true``), where it fails.

The inner run's summary (its counts, every failure, every skip with its
reason, its slowest tests) is written into the outer run's output, passed or not, so a log shows
that the SkyRL training steps ran; in CI a skipped training-step test fails
the outer test.
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from collections import deque
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / ".venv-skyrl"
STAMP = VENV / "skyrl-rewards-pyproject.sha256"
BUILD_TIMEOUT_S = 3000
INNER_ARGS = ("-q", "-p", "no:cacheprovider", "-rfEs", "--durations=8")
"""The inner pytest's options: quiet, failures, errors and skips (with reasons) listed, the 8
slowest tests."""
VLLM_PROTOCOL_TESTS = "tests/models/test_vllm_protocol.py"
"""Run in the same venv as tests/skyrl_trainer: they need vLLM installed (skipped without it)."""
STEP_TESTS = ("test_skyrl_training_step", "test_fully_async")
"""The modules of the SkyRL training-step tests (synchronous and fully async): one of their
tests skipped in CI, the outer test fails."""


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


def run_inner(
    python: Path | str, targets: list[Path | str], junit: Path, *, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """Run pytest on ``targets`` with ``python`` (:data:`INNER_ARGS`, results into ``junit``)."""
    return subprocess.run(
        [str(python), "-m", "pytest", *INNER_ARGS, f"--junitxml={junit}", *map(str, targets)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def inner_summary(stdout: str) -> str:
    """The inner run's closing part: slowest tests, skips with reasons, the counts line."""
    lines = stdout.rstrip().splitlines()
    starts = [
        i for i, line in enumerate(lines) if "slowest" in line or "short test summary" in line
    ]
    return "\n".join(lines[starts[0] if starts else -1 :])


def skipped_tests(junit: Path) -> list[tuple[str, str]]:
    """``(module.test, reason)`` of every skipped test of a junit XML report."""
    return [
        (f"{case.get('classname')}.{case.get('name')}", skip.get("message", ""))
        for case in ET.parse(junit).getroot().iter("testcase")
        for skip in case.findall("skipped")
    ]


def report_inner(title: str, stdout: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Write the inner run's summary into the outer run's output (pytest's capture lifted)."""
    with capsys.disabled():
        summary = "\n".join(f"  {line}" for line in inner_summary(stdout).splitlines())
        sys.stdout.write(f"\n{title}:\n{summary}\n")
        sys.stdout.flush()


def step_skips(skipped: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The skipped tests of :data:`STEP_TESTS`."""
    return [
        (test, why) for test, why in skipped if any(f"{module}." in test for module in STEP_TESTS)
    ]


@pytest.mark.slow
@pytest.mark.timeout(4800)
def test_envs_inside_the_real_skyrl_on_python312(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    if not python312_available():
        if os.environ.get("CI") == "true":
            pytest.fail("CI needs Python 3.12 for the SkyRL tests (set PYTHON312 or install it)")
        pytest.skip("no Python 3.12 (SkyRL 0.4 needs it): set PYTHON312 to run the SkyRL tests")
    python = ensure_venv(capsys)
    junit = tmp_path / "skyrl_trainer.xml"
    # the three CPU training steps add about 6 min on 2 cores
    run = run_inner(python, ["tests/skyrl_trainer", VLLM_PROTOCOL_TESTS], junit, timeout_s=2700)
    report_inner("tests/skyrl_trainer in .venv-skyrl (Python 3.12, SkyRL 0.4)", run.stdout, capsys)
    assert run.returncode == 0, run.stdout[-8000:] + run.stderr[-3000:]
    assert " passed" in run.stdout.splitlines()[-1]
    skipped = skipped_tests(junit)
    skipped_steps = step_skips(skipped)
    if os.environ.get("CI") == "true":
        assert not skipped_steps, f"SkyRL training steps skipped in CI: {skipped_steps}"
    assert not [t for t, _ in skipped if "test_vllm_protocol" in t], "vLLM protocol tests skipped"


NESTED = """
import time

import pytest


def test_runs() -> None:
    time.sleep(0.05)


@pytest.mark.skip(reason="no GPU here")
def test_on_a_gpu() -> None:
    pass
"""


@pytest.mark.parametrize("module", ["test_other", *STEP_TESTS])
def test_the_inner_summary_shows_counts_skips_and_slowest(
    module: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a tiny inner suite run as the SkyRL one is, with this interpreter: one pass, one skip
    (tmp_path / f"{module}.py").write_text(NESTED)
    junit = tmp_path / "inner.xml"
    run = run_inner(sys.executable, [tmp_path / f"{module}.py"], junit, timeout_s=120)
    assert run.returncode == 0, run.stdout
    summary = inner_summary(run.stdout)
    assert "slowest 8 durations" in summary and "test_runs" in summary
    assert "no GPU here" in summary
    assert summary.splitlines()[-1].startswith("1 passed, 1 skipped")
    report_inner("inner", run.stdout, capsys)
    assert capsys.readouterr().out == ""  # written past the capture, into the run's output
    skipped = skipped_tests(junit)
    assert [why for _, why in skipped] == ["no GPU here"]
    # only a skipped training-step test counts as one (and fails the outer test in CI)
    assert len(step_skips(skipped)) == (module in STEP_TESTS)
