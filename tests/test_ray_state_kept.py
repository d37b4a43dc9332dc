"""The test session leaves the user's Ray "current cluster" file and token as it found them.

A nested pytest session (with this suite's conftest), in a Ray temp dir and a
home of its own, writes the current-cluster file as a test cluster does
(``ray start`` and ``ray.cluster_utils.Cluster`` call ``write_ray_address``)
and starts a real local Ray (which writes ``~/.ray/auth_token`` when there is
none); afterwards both files must be the user's again, or absent when they were.
The project's own local Ray (``skyrl-rewards score``) writes no token at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent

RAY_SETTINGS = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "RAY_AUTH_MODE", "RAY_ADDRESS")
"""The user's Ray settings a nested run must not inherit."""


def _without_ray_settings(**values: str) -> dict[str, str]:
    """This process's environment without :data:`RAY_SETTINGS`, then ``values`` set."""
    env = {name: value for name, value in os.environ.items() if name not in RAY_SETTINGS}
    return {**env, **values}


def _nested_run(test: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """A nested pytest run of the test source ``test`` (in ``folder``) with this suite's conftest,
    in ``env``; asserts that it passed."""
    (folder / "test_nested.py").write_text(test)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p", "no:cacheprovider"]
        + [str(folder / "test_nested.py")],
        cwd=folder,
        env={**env, "PYTHONPATH": f"{TESTS}{os.pathsep}{TESTS.parent}"},
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    return done


A_TEST_CLUSTER = """
import os

import ray
import ray._private.utils
from ray._common.utils import get_ray_address_file


def test_test_clusters_write_the_current_cluster_file_and_a_token() -> None:
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)  # as Ray's start does
    ray._private.utils.write_ray_address("127.0.0.1:9")  # a test cluster, since stopped
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    ray.shutdown()
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "users_files",
    [
        (b"10.0.0.5:6379", b"users-token"),  # the user's own `ray start --head`, and its token
        (None, None),  # no cluster of the user's, no token: no files
    ],
)
def test_a_session_leaves_the_users_ray_files_as_they_were(
    users_files: tuple[bytes | None, bytes | None], tmp_path: Path
) -> None:
    with tempfile.TemporaryDirectory(prefix="skr_", dir="/tmp") as ray_tmp:  # Ray wants short paths
        home = tmp_path / "home"
        files = [Path(ray_tmp) / "ray" / "ray_current_cluster", home / ".ray" / "auth_token"]
        for path, content in zip(files, users_files, strict=True):
            if content is not None:
                path.parent.mkdir(parents=True)
                path.write_bytes(content)
        env = _without_ray_settings(RAY_TMPDIR=ray_tmp, HOME=str(home))
        done = _nested_run(A_TEST_CLUSTER, tmp_path, env)
        assert "1 passed" in done.stdout
        for path, content in zip(files, users_files, strict=True):
            if content is None:
                assert not path.exists(), path
            else:
                assert path.read_bytes() == content, path


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "token_written"),
    [
        (None, False),  # a user's shell: the project's local Ray asks for no token, writes none
        ("token", True),  # the user asked for token authentication: Ray's own behaviour, kept
    ],
)
def test_a_local_pool_leaves_the_users_ray_token_alone(
    mode: str | None, token_written: bool, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    mode_setting = {"RAY_AUTH_MODE": mode} if mode is not None else {}
    env = _without_ray_settings(HOME=str(home), PYTHONPATH=str(TESTS.parent), **mode_setting)
    sample = TESTS.parent / "skyrl_rewards" / "sample_data" / "math.jsonl"
    done = subprocess.run(
        # --pool: 24 rows would be scored in this process, without Ray (issue 43)
        [sys.executable, "-m", "skyrl_rewards.cli", "score", "--config", "math.yaml", "--pool"]
        + ["--input", str(sample), "--output", str(tmp_path / "out.jsonl"), "--no-progress"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "scored 24 rows" in done.stdout
    assert (home / ".ray" / "auth_token").exists() is token_written, done.stderr[-3000:]
    assert "Token authentication is enabled" not in done.stderr  # Ray's warning on every run


A_RUN_WITHOUT_RAY_TMPDIR = """
import os
from pathlib import Path

import ray


def test_a_local_ray_writes_under_the_runs_folder() -> None:
    ray.init(address="local", num_cpus=1, include_dashboard=False, _node_ip_address="127.0.0.1")
    session = ray._private.worker._global_node.get_session_dir_path()
    ray.shutdown()
    Path(os.environ["RUN_RECORD"]).write_text(os.environ["RAY_TMPDIR"] + "\\n" + session)
"""


@pytest.mark.slow
def test_a_run_removes_its_ray_temp_folder(tmp_path: Path) -> None:
    # issue 43: the suite left its Ray session folders in /tmp/ray. A run started without
    # RAY_TMPDIR claims a folder of its own, where its Ray sessions go, and removes it at the end
    record = tmp_path / "record.txt"
    env = _without_ray_settings(HOME=str(tmp_path), RUN_RECORD=str(record))
    env.pop("RAY_TMPDIR", None)
    done = _nested_run(A_RUN_WITHOUT_RAY_TMPDIR, tmp_path, env)
    folder, session = record.read_text().splitlines()
    assert folder.startswith("/tmp/skr_") and session.startswith(f"{folder}/ray/session_")
    assert not Path(folder).exists()
    assert "left running by the tests" not in done.stdout  # its Ray ended with ray.shutdown()
