"""One Ray temp folder per test run, removed at its end (issue 43: the suite left hundreds of
session folders in /tmp/ray).

:func:`claim` points ``RAY_TMPDIR`` at a fresh short folder (``/tmp/skr_*``: Ray's socket paths
must be short) before Ray is imported, so every Ray session the run starts writes there: the
shared local Ray, the test clusters, and the CLIs and nested runs the tests start, which inherit
the environment. :func:`release` waits for the processes that still name the folder (this
run's Ray processes) to end, stops those that do not, removes the folder and says which
processes it had to stop. A run started with ``RAY_TMPDIR`` set (a nested pytest, a user's
choice) keeps that folder and leaves it alone.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil

WAIT_S = 15.0
"""How long :func:`release` waits for the run's Ray processes to end by themselves."""


def claim() -> Path | None:
    """A new Ray temp folder for this run, set as ``RAY_TMPDIR``; None when one was set."""
    if "RAY_TMPDIR" in os.environ:
        return None
    folder = Path(tempfile.mkdtemp(prefix="skr_", dir="/tmp"))
    os.environ["RAY_TMPDIR"] = str(folder)
    return folder


def processes_using(folder: Path) -> list[psutil.Process]:
    """The processes other than this one whose command line names ``folder``."""
    marker, found = str(folder), []
    for process in psutil.process_iter(["cmdline"]):
        if process.pid != os.getpid() and any(
            marker in part for part in process.info["cmdline"] or ()
        ):
            found.append(process)
    return found


def release(folder: Path, *, wait_s: float = WAIT_S) -> list[str]:
    """Remove ``folder`` once no process names it; returns the processes that were still
    running after ``wait_s`` and were stopped (``"pid name"``), ``[]`` when none was."""
    deadline = time.monotonic() + wait_s
    while (alive := processes_using(folder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    stopped = []
    for process in alive:
        try:
            stopped.append(f"{process.pid} {process.name()}")
            process.terminate()
        except psutil.NoSuchProcess:
            continue
    _, still = psutil.wait_procs(alive, timeout=5)
    for process in still:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            continue
    shutil.rmtree(folder, ignore_errors=True)
    return stopped
