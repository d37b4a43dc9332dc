"""Fixtures of the SkyRL tests: the test tokenizer and a loopback-only local Ray."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import pytest  # noqa: E402
import ray  # noqa: E402
from skyrl_helpers import build_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tokenizer() -> Any:
    return build_tokenizer()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[None]:
    """A loopback-only local Ray for the reward pool the envs connect to."""
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        _node_ip_address="127.0.0.1",
        namespace="skyrl_rewards",
        log_to_driver=False,
    )
    yield
    ray.shutdown()
