"""The test session leaves the user's Ray "current cluster" file as it found it.

A nested pytest session (with this suite's conftest) in a Ray temp dir of its
own writes the file as a test cluster does (``ray start`` and
``ray.cluster_utils.Cluster`` call ``write_ray_address``); afterwards the file
must hold the user's address again, or be absent when it was absent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

A_TEST_CLUSTER = """
import os

import ray._private.utils
from ray._common.utils import get_ray_address_file


def test_a_test_cluster_writes_the_current_cluster_file() -> None:
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)  # as Ray's start does
    ray._private.utils.write_ray_address("127.0.0.1:9")  # a test cluster, since stopped
"""


@pytest.mark.parametrize(
    "users_file",
    [
        b"10.0.0.5:6379",  # the user's own `ray start --head`
        None,  # no cluster of the user's: no file
    ],
)
def test_a_session_leaves_the_users_current_cluster_file_as_it_was(
    users_file: bytes | None, tmp_path: Path
) -> None:
    with tempfile.TemporaryDirectory(prefix="skr_", dir="/tmp") as ray_tmp:  # Ray wants short paths
        address_file = Path(ray_tmp) / "ray" / "ray_current_cluster"
        if users_file is not None:
            address_file.parent.mkdir()
            address_file.write_bytes(users_file)
        (tmp_path / "test_nested.py").write_text(A_TEST_CLUSTER)
        env = dict(os.environ, RAY_TMPDIR=ray_tmp, PYTHONPATH=f"{TESTS}{os.pathsep}{TESTS.parent}")
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider"]
            + [str(tmp_path / "test_nested.py")],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stdout[-3000:]
        assert "1 passed" in done.stdout
        if users_file is None:
            assert not address_file.exists()
        else:
            assert address_file.read_bytes() == users_file
