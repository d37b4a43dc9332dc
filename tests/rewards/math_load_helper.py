"""Run by ``test_math_load.py`` in a fresh process: guarded math checks next to busy processes.

The process pins itself to one CPU before its first check, so the math fork
server and every child it forks share that CPU; the busy processes it starts
are pinned there too. Prints one JSON object: the quiet figures, then those
of the same checks under that load.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from skyrl_rewards.rewards.text.math_check import check_equal, last_check_usage
from skyrl_rewards.rewards.text.math_children import MathStatus

GOLD = "$\\frac{1}{2}$"
HANG = "$(x+1)^{99999} - (x-1)^{99999}$"
"""An answer whose check runs far past any limit here (expanding a polynomial of degree 99,999)."""
HANG_LIMIT_S = 0.15


VARIABLES = "abcdefg"
"""One per check: a child that checked an answer has SymPy's cache warm for that answer."""


def borderline(exponent: int, variable: str) -> str:
    """A correct answer to :data:`GOLD` whose check costs CPU growing with ``exponent``."""
    n, v = exponent, variable
    return f"$1/2 + ({v}+1)^{{{n}}} ({v}-1)^{{{n}}} - ({v}^2-1)^{{{n}}}$"


def checked(student: str, limit_s: float) -> dict[str, Any]:
    """One guarded check: its outcome and what it cost."""
    outcome = check_equal(GOLD, student, timeout_s=limit_s)
    usage = last_check_usage()
    return {
        "outcome": outcome.value,
        "cpu_s": None if usage is None else usage.cpu_s,
        "wall_s": None if usage is None else usage.wall_s,
        "extended": None if usage is None else usage.extended,
    }


def main(busy_count: int, exponent: int) -> None:
    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    report: dict[str, Any] = {"cpu": cpu}
    if check_equal(GOLD, "0.5") is not MathStatus.EQUAL:  # the fork server starts, pinned
        raise RuntimeError("the math fork server did not judge 0.5 equal to 1/2")
    quiet = [checked(borderline(exponent, variable), 60.0) for variable in VARIABLES[:3]]
    report["quiet"] = quiet
    cheapest = min(check["cpu_s"] for check in quiet)
    dearest = max(check["cpu_s"] for check in quiet)
    report["quiet_cpu_s"] = [cheapest, dearest]
    burn = f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"
    busy = [subprocess.Popen([sys.executable, "-c", burn]) for _ in range(busy_count)]
    try:
        time.sleep(0.3)
        # inside the limit: 1.1x the dearest quiet check
        limit_s = 1.1 * dearest
        report["inside"] = {"limit_s": limit_s, **checked(borderline(exponent, "d"), limit_s)}
        # a limit the answer needs more than (0.9x the cheapest): the first attempt times out
        limit_s = 0.9 * cheapest
        report["tight"] = {"limit_s": limit_s, **checked(borderline(exponent, "e"), limit_s)}
        report["hang"] = {"limit_s": HANG_LIMIT_S, **checked(HANG, HANG_LIMIT_S)}
        report["hang_again"] = checked(HANG, HANG_LIMIT_S)
    finally:
        for process in busy:
            process.kill()
            process.wait()
    sys.stdout.write(json.dumps(report) + "\n")


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))
