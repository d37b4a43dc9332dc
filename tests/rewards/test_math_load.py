"""math-verify's CPU-time limit on an oversubscribed machine (issue 33, item 3).

CPU time itself grows when a check shares its core with busy processes, so
a correct answer inside the limit could time out under load. A check that
reaches its limit having waited for a CPU much of the time goes on to
:data:`CONTENDED_MARGIN` times the limit. The load is made here: busy
processes pinned to the CPU that the checks (fork server and children) are
pinned to, in a fresh process (``math_load_helper.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from skyrl_rewards.rewards.text.math_check import CONTENDED_MARGIN
from skyrl_rewards.rewards.text.math_children import CONTENDED_RATIO

HELPER = Path(__file__).with_name("math_load_helper.py")
BUSY_PROCESSES = 3
EXPONENT = 50
"""The borderline answer's size: about 0.25 s of CPU per check on the development machine."""
HELPER_TIMEOUT_S = 120


def _run_helper() -> dict[str, Any]:
    try:
        done = subprocess.run(
            [sys.executable, str(HELPER), str(BUSY_PROCESSES), str(EXPONENT)],
            capture_output=True,
            text=True,
            timeout=HELPER_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as error:
        raise AssertionError(
            f"{HELPER.name} did not finish within {HELPER_TIMEOUT_S} s: the machine is loaded "
            f"far past {BUSY_PROCESSES + 1} processes per CPU; rerun on a quieter machine"
        ) from error
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    return _run_helper()


def _ratio(check: dict[str, Any]) -> float:
    return check["cpu_s"] / check["wall_s"]


def test_the_load_was_there(report: dict[str, Any]) -> None:
    quiet_ratio = max(_ratio(check) for check in report["quiet"])
    loaded_ratio = _ratio(report["inside"])
    assert loaded_ratio < CONTENDED_RATIO
    assert loaded_ratio < 0.7 * quiet_ratio, (quiet_ratio, loaded_ratio)
    assert all(check["outcome"] == "equal" for check in report["quiet"])


def test_an_answer_inside_the_limit_is_judged_under_load(report: dict[str, Any]) -> None:
    inside = report["inside"]
    assert inside["outcome"] == "equal", inside


def test_a_check_past_its_limit_under_load_gets_the_margin(report: dict[str, Any]) -> None:
    tight = report["tight"]
    # the check ran past its limit (0.9x the cheapest quiet check) ...
    assert tight["extended"], tight
    assert tight["cpu_s"] > tight["limit_s"], tight
    # ... and, given the margin, judged the answer
    assert tight["outcome"] == "equal", tight
    assert tight["limit_s"] * CONTENDED_MARGIN > max(report["quiet_cpu_s"])


def test_a_hang_under_load_costs_the_margin_then_counts(report: dict[str, Any]) -> None:
    hang = report["hang"]
    assert hang["outcome"] == "timeout" and hang["extended"], hang
    limit_s = hang["limit_s"]
    # it ran to the margin: 0.3 s of CPU (polled every 20 ms, in 10 ms ticks)
    assert limit_s * CONTENDED_MARGIN <= hang["cpu_s"] < limit_s * CONTENDED_MARGIN + 0.2
    # remembered: asked again, it is a timeout at once, with no child run
    assert report["hang_again"] == {
        "outcome": "timeout",
        "cpu_s": None,
        "wall_s": None,
        "extended": None,
    }
