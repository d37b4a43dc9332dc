"""The package's layers: imports point one way, and the reward functions load without Ray.

integrations (``train``, ``cli``, ``data``) -> ``pool`` (Ray) -> ``rewards`` (pure).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import skyrl_rewards
from skyrl_rewards.pool.config import load_pool_config

PACKAGE = Path(skyrl_rewards.__file__).resolve().parent
HEAVY = (
    "ray",
    "skyrl_gym",
    "skyrl",
    "pandas",
    "pyarrow",
    "torch",
    "transformers",
    "omegaconf",
    # the COCO mAP methods import these on their first evaluation (0.13 s)
    "pycocotools",
    "numpy",
)

# layer -> what its modules may not import (prefixes of module names)
FORBIDDEN = {
    "rewards": (
        "ray",
        "skyrl_gym",
        "skyrl.",
        "skyrl_rewards.pool",
        "skyrl_rewards.train",
        "skyrl_rewards.cli",
        "skyrl_rewards.data",
        "tau_bench_env",
    ),
    "pool": (
        "skyrl_gym",
        "skyrl.",
        "skyrl_rewards.train",
        "skyrl_rewards.cli",
        "skyrl_rewards.data",
        "tau_bench_env",
    ),
}


def imported_modules(path: Path) -> list[str]:
    """Every module an ``import`` or ``from ... import`` in the file names (lazy ones included)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer: str) -> None:
    offences = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in imported_modules(path)
        if any(name == p.rstrip(".") or name.startswith(p) for p in FORBIDDEN[layer])
    ]
    assert offences == []


def modules_loaded_by(code: str) -> list[str]:
    """The heavy modules a fresh interpreter has loaded after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\nprint(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        # what a TRL script imports
        "from skyrl_rewards import default_accuracy_reward, iou_reward, format_reward",
        "from skyrl_rewards import accuracy_reward, make_reward, RewardMix, RewardResult",
        # the package itself, and the pool's settings (read by the env and the CLI)
        "import skyrl_rewards, skyrl_rewards.pool.config, skyrl_rewards.train",
        # what the math child process imports
        "import skyrl_rewards.rewards.math_child",
    ],
)
def test_reward_functions_import_without_the_runtime(code: str) -> None:
    assert modules_loaded_by(code) == []


def test_facade_resolves_every_public_name() -> None:
    assert sorted(skyrl_rewards.__all__) == sorted(skyrl_rewards._EXPORTS)
    for name in skyrl_rewards.__all__:
        assert getattr(skyrl_rewards, name) is not None
    with pytest.raises(AttributeError, match="no_such_name"):
        skyrl_rewards.no_such_name  # noqa: B018


@pytest.mark.slow
def test_plain_wheel_carries_the_configs_and_the_sample_data(tmp_path: Path) -> None:
    # `pip install .` (not editable): the wheel alone must find `configs/rec.yaml` from any directory
    root = PACKAGE.parent
    source = tmp_path / "source"  # a copy: pip builds in the source tree (build/, *.egg-info)
    for name in ("skyrl_rewards", "tau_bench_env", "configs"):
        shutil.copytree(root / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(source)],
        check=True,
        timeout=300,
    )
    wheel = next(tmp_path.glob("skyrl_rewards-*.whl"))
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    assert sorted(p.name for p in (site / "skyrl_rewards" / "configs").glob("*.yaml")) == sorted(
        p.name for p in (root / "configs").glob("*.yaml")
    )
    assert (site / "skyrl_rewards" / "sample_data" / "rec.jsonl").is_file()
    probe = (
        "from skyrl_rewards.pool.config import load_pool_config\n"
        "cfg = load_pool_config('configs/rec.yaml')\n"
        "print(sorted(cfg.rewards))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(
        sorted(load_pool_config(root / "configs" / "rec.yaml").rewards)
    )


def test_pyproject_lists_every_package() -> None:
    root = PACKAGE.parent
    text = (root / "pyproject.toml").read_text()
    listed = text.split("packages = [")[1].split("]")[0]
    found = {
        ".".join(init.parent.relative_to(root).parts)
        for top in ("skyrl_rewards", "tau_bench_env")
        for init in (root / top).rglob("__init__.py")
    } | {"skyrl_rewards.configs"}
    assert {name.strip().strip('",') for name in listed.split() if name.strip()} == found
