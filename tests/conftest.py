"""Shared fixtures: one real local Ray for the whole session, bound to loopback.

``ray_local`` starts Ray once (4 logical CPUs, no dashboard, 127.0.0.1 only) and
shuts it down at the end of the session. A test that needs its own cluster (the
multi-node tests) shuts this one down first; the next test that asks for
``ray_local`` starts it again.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import ray

RAY_NAMESPACE = "skyrl_rewards"
RAY_LOCAL_CPUS = 4


def start_local_ray() -> None:
    """Start the loopback-only local Ray the tests share (no-op when connected)."""
    if not ray.is_initialized():
        ray.init(address="local", num_cpus=RAY_LOCAL_CPUS, include_dashboard=False,
                 _node_ip_address="127.0.0.1", namespace=RAY_NAMESPACE, log_to_driver=False)


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
