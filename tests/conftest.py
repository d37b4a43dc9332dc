"""Shared fixtures: one real local Ray for the whole session, bound to loopback.

``ray_local`` starts Ray once (4 logical CPUs, no dashboard, 127.0.0.1 only) and
shuts it down at the end of the session. A test that needs its own cluster (the
multi-node tests) shuts this one down first; the next test that asks for
``ray_local`` starts it again.

The session leaves the user's Ray state as it found it: Ray's "current
cluster" file (``ray_current_cluster`` in Ray's temp dir, what
``address="auto"`` reads) is written by the test clusters (``ray start``,
``ray.cluster_utils.Cluster``) and deleted by some of them, and Ray 2.60's
``ray.init`` creates ``~/.ray/auth_token`` when there is none (after which a
user's ``ray start --head`` turns on token authentication); both are saved at
the start and put back at the end.

Every Ray session of the run writes under one temp folder of its own (``RAY_TMPDIR``
set before Ray is imported, inherited by the CLIs and clusters the tests start), removed
when the run ends; a Ray process still running then is named in the summary and stopped
(:mod:`ray_temp`).
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ray_temp import claim, release

# Before Ray is imported: keep every Ray address on 127.0.0.1. Without this Ray swaps a
# loopback node address for the host's IP, and a multi-node test cluster cannot reach itself.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# ... and every Ray session of this run in one folder of its own, removed at the end (ray_temp)
RUN_RAY_TMPDIR = claim()

import pytest  # noqa: E402
import ray  # noqa: E402
from ray._common.utils import get_ray_address_file  # noqa: E402

# tests/skyrl_trainer needs the skyrl package (Python 3.12); test_skyrl_trainer_py312.py runs it
# in a venv of its own when this interpreter does not have it.
collect_ignore = [] if importlib.util.find_spec("skyrl") else ["skyrl_trainer"]

RAY_NAMESPACE = "skyrl_rewards"
RAY_LOCAL_CPUS = 4


def start_local_ray() -> None:
    """Start the loopback-only local Ray the tests share (no-op when connected)."""
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=RAY_LOCAL_CPUS,
            include_dashboard=False,
            _node_ip_address="127.0.0.1",
            namespace=RAY_NAMESPACE,
            log_to_driver=False,
        )


@contextmanager
def file_kept(path: Path) -> Iterator[None]:
    """Put ``path`` back as it was on exit: its bytes, or no file when there was none."""
    saved = path.read_bytes() if path.is_file() else None
    try:
        yield
    finally:
        if saved is None:
            path.unlink(missing_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(saved)


RAY_TOKEN_FILE = Path.home() / ".ray" / "auth_token"
"""Where ``ray.init`` writes a new token (Ray's default token path)."""


@pytest.fixture(scope="session", autouse=True)
def _users_ray_state_kept() -> Iterator[None]:
    """The user's ``ray_current_cluster`` and Ray token as before the session (module doc)."""
    with file_kept(Path(get_ray_address_file(None))), file_kept(RAY_TOKEN_FILE):
        yield


@pytest.fixture(scope="session")
def _ray_session() -> Iterator[None]:
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture
def ray_local(_ray_session: None) -> Iterator[None]:
    """A running local Ray (started at most once per session, unless a test replaced it)."""
    start_local_ray()
    yield


@pytest.fixture(scope="module")
def ray_module(_ray_session: None) -> Iterator[None]:
    """Like ``ray_local``, for module-scoped fixtures (a pool shared by a test module)."""
    start_local_ray()
    yield


_AREA_SECONDS: dict[str, float] = {}
"""Seconds spent per test area (a test folder, or a module of tests/), for the closing summary."""
AREAS_SHOWN = 12


def _area(nodeid: str) -> str:
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) + "/" if len(parts) > 2 else path


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each test phase's time (setup, call, teardown) to its area."""
    area = _area(report.nodeid)
    _AREA_SECONDS[area] = _AREA_SECONDS.get(area, 0.0) + report.duration


_STOPPED: list[str] = []
"""This run's Ray processes that outlived every test and were stopped at the end (ray_temp)."""


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Remove this run's Ray temp folder (every test and fixture has stopped its Ray by now)."""
    if RUN_RAY_TMPDIR is not None:
        if ray.is_initialized():
            ray.shutdown()
        _STOPPED.extend(release(RUN_RAY_TMPDIR))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where the run's time went, by area, slowest first (issue 43: a 54-minute run said only
    dots); ``--durations=N`` lists the slowest single tests. Names the Ray processes that a
    test left running (stopped by :func:`pytest_sessionfinish`)."""
    if _STOPPED:
        terminalreporter.section("Ray processes left running by the tests (now stopped)")
        terminalreporter.write_line(
            f"{len(_STOPPED)} processes of this run's Ray temp folder {RUN_RAY_TMPDIR} "
            f"outlived the tests: {', '.join(_STOPPED[:10])}; a fixture does not stop its cluster"
        )
    if not _AREA_SECONDS:
        return
    total = sum(_AREA_SECONDS.values())
    terminalreporter.section(f"time by test area ({total / 60:.1f} min in tests)")
    ranked = sorted(_AREA_SECONDS.items(), key=lambda item: -item[1])
    for area, seconds in ranked[:AREAS_SHOWN]:
        terminalreporter.write_line(f"{seconds:8.1f} s  {seconds / total:4.0%}  {area}")
    if len(ranked) > AREAS_SHOWN:
        rest = sum(seconds for _, seconds in ranked[AREAS_SHOWN:])
        terminalreporter.write_line(
            f"{rest:8.1f} s  {rest / total:4.0%}  {len(ranked) - AREAS_SHOWN} more areas"
        )
