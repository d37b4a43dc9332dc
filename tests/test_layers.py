"""The packages' layers: imports point one way, and the reward functions load without Ray.

skyrl_rewards: integrations (``train``, ``cli``, ``data``, ``serve``) -> ``pool`` (Ray) -> ``rewards``
(pure); ``cli`` may start ``serve``, ``serve`` imports no other integration.
tau_bench_env: ``cli`` -> ``evaluation`` -> ``rescoring`` -> ``episode`` -> ``users``,
``backends`` -> ``data_model`` -> ``config``. Between the packages: ``tau_bench_env`` may
import ``skyrl_rewards``, never the other way round. Inside a layer too, no two modules import
each other, however indirectly (a constant or contract both need lives in a module below both).
Inside ``rewards``, folders by family: a family imports only the contract, the shared geometry
and its own folder (:func:`family_offences`); no module is over :data:`MAX_MODULE_LINES` lines
without saying why in its docstring.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path

import pytest

import skyrl_rewards
import tau_bench_env
from skyrl_rewards.pool.config import load_pool_config

PACKAGE = Path(skyrl_rewards.__file__).resolve().parent
TAU_PACKAGE = Path(tau_bench_env.__file__).resolve().parent
HEAVY = (
    "ray",
    "skyrl_gym",
    "skyrl",
    "pandas",
    "pyarrow",
    "torch",
    "transformers",
    "omegaconf",
    "httpx",
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
        "skyrl_rewards.serve",
        "tau_bench_env",
    ),
    "pool": (
        "skyrl_gym",
        "skyrl.",
        "skyrl_rewards.train",
        "skyrl_rewards.cli",
        "skyrl_rewards.data",
        "skyrl_rewards.serve",
        "tau_bench_env",
    ),
    "serve": (
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


def module_name(path: Path, root: Path) -> str:
    """The dotted name of a module file under ``root`` (a package's ``__init__`` is the package)."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(packages: Iterable[Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports, at module level or inside a function.

    ``from a.b import c`` names the module ``a.b.c`` when that is a module, else ``a.b``;
    relative imports are resolved against the importing module's package.
    """
    files = {
        module_name(path, package.parent): path
        for package in packages
        for path in sorted(package.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        base = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                parent = node.module or ""
                if node.level:
                    anchor = base.split(".")[: len(base.split(".")) - (node.level - 1)]
                    parent = ".".join([*anchor, *([parent] if parent else [])])
                for alias in node.names:
                    child = f"{parent}.{alias.name}"
                    targets.add(child if child in files else parent)
        graph[module] = {t for t in targets if t in files and t != module}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every group of modules that import each other, directly or not (Tarjan's strongly
    connected components of more than one module), each sorted; the groups sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for target in sorted(graph[module]):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in on_stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(circles)


def test_no_module_imports_itself_through_others() -> None:
    # module-level and lazy (function-level) imports alike, between any two modules
    assert import_circles(import_graph([PACKAGE, TAU_PACKAGE])) == []


def test_the_circle_check_finds_a_circle(tmp_path: Path) -> None:
    # a tiny package: a -> b at module level, b -> c inside a function, c -> a relatively;
    # d imports a but nothing imports d, so d is outside the circle
    package = tmp_path / "tiny"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from tiny.b import VALUE\n")
    (package / "b.py").write_text("VALUE = 1\n\n\ndef f():\n    import tiny.c\n")
    (package / "c.py").write_text("from . import a\n")
    (package / "d.py").write_text("from tiny import a\n")
    graph = import_graph([package])
    assert import_circles(graph) == [["tiny.a", "tiny.b", "tiny.c"]]
    (package / "c.py").write_text("VALUE = 2\n")  # the circle broken: none left
    assert import_circles(import_graph([package])) == []


# rewards/: room -> the rooms its modules may import (their own included). "" is the top of
# rewards/ (the registry, the cross-family accuracy, mix, batch): it may import every room.
REWARD_FAMILIES = ("text", "boxes", "gui", "documents", "models")
REWARD_ROOMS = {
    "contract": {"contract"},
    "geometry": {"geometry", "contract"},
    **{family: {family, "geometry", "contract"} for family in REWARD_FAMILIES},
}
REWARD_TOP = {"__init__", "accuracy", "registry", "mix", "batch"}
"""The modules at the top of rewards/, above the families."""
MAX_MODULE_LINES = 600
"""Modules longer than this say why they stay whole: "stays whole" in their docstring."""


def reward_room(module: str, folders: set[str]) -> str:
    """The room of a module of ``<package>.rewards``: its folder, or ``""`` at the top."""
    parts = module.split(".")[2:]  # past "<package>.rewards"
    return parts[0] if parts and (len(parts) > 1 or parts[0] in folders) else ""


def family_offences(package: Path) -> list[str]:
    """Every module of ``package``'s ``rewards/`` outside the rooms, and every import that
    crosses from one room to a room it may not import (a family to another, the contract up).
    """
    prefix = f"{package.name}.rewards"
    graph = import_graph([package])
    folders = {p.parent.name for p in (package / "rewards").glob("*/__init__.py")}
    offences = []
    for module in sorted(m for m in graph if m == prefix or m.startswith(prefix + ".")):
        room = reward_room(module, folders)
        if room == "":
            name = module.rpartition(".")[2] if module != prefix else "__init__"
            if name not in REWARD_TOP:
                offences.append(f"{module} is in no family folder")
            continue
        if room not in REWARD_ROOMS:
            offences.append(f"{module} is in an unknown folder {room!r}")
            continue
        for target in sorted(graph[module]):
            if not target.startswith(prefix + "."):
                continue
            if reward_room(target, folders) not in REWARD_ROOMS[room]:
                offences.append(f"{module} imports {target}")
    return offences


def test_reward_families_import_only_the_contract_the_geometry_and_themselves() -> None:
    assert family_offences(PACKAGE) == []
    found = {p.parent.name for p in (PACKAGE / "rewards").glob("*/__init__.py")}
    assert found == set(REWARD_ROOMS)


def test_the_family_check_finds_a_crossing(tmp_path: Path) -> None:
    # gui imports boxes (one family another), the contract imports a model, and a module
    # sits at the top of rewards/ outside the registry's company
    rewards = tmp_path / "pkg" / "rewards"
    for room in ("contract", "geometry", "boxes", "gui", "models"):
        (rewards / room).mkdir(parents=True)
        (rewards / room / "__init__.py").write_text("")
    (rewards.parent / "__init__.py").write_text("")
    (rewards / "__init__.py").write_text("")
    (rewards / "registry.py").write_text("from pkg.rewards.gui import point\n")
    (rewards / "components.py").write_text("")
    (rewards / "contract" / "base.py").write_text(
        "def f():\n    from pkg.rewards.models import m\n"
    )
    (rewards / "models" / "m.py").write_text("from pkg.rewards.contract import base\n")
    (rewards / "geometry" / "shapes.py").write_text("from pkg.rewards.contract import base\n")
    (rewards / "boxes" / "iou.py").write_text("from pkg.rewards.geometry import shapes\n")
    (rewards / "gui" / "point.py").write_text("from pkg.rewards.boxes.iou import f\n")
    assert family_offences(tmp_path / "pkg") == [
        "pkg.rewards.components is in no family folder",
        "pkg.rewards.contract.base imports pkg.rewards.models.m",
        "pkg.rewards.gui.point imports pkg.rewards.boxes.iou",
    ]


def test_long_modules_say_why_they_stay_whole() -> None:
    offences = []
    for package in (PACKAGE, TAU_PACKAGE):
        for path in sorted(package.rglob("*.py")):
            lines = len(path.read_text().splitlines())
            docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
            if lines > MAX_MODULE_LINES and "stays whole" not in docstring:
                offences.append(f"{path.relative_to(package.parent)}: {lines} lines")
    assert offences == []


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer: str) -> None:
    offences = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in imported_modules(path)
        if any(name == p.rstrip(".") or name.startswith(p) for p in FORBIDDEN[layer])
    ]
    assert offences == []


# tau_bench_env's layers -> the layers of tau_bench_env their modules may import (their own
# included); "" is the package's top level (the facade __init__ and config.py)
TAU_ALLOWED = {
    "config": set(),
    "data_model": {"data_model", "config"},
    "backends": {"backends", "data_model", "config"},
    "users": {"users", "config"},
    "episode": {"episode", "users", "backends", "data_model", "config"},
    "rescoring": {"rescoring", "episode", "users", "backends", "data_model", "config"},
    "evaluation": {
        "evaluation",
        "rescoring",
        "episode",
        "users",
        "backends",
        "data_model",
        "config",
    },
    "cli": {
        "cli",
        "evaluation",
        "rescoring",
        "episode",
        "users",
        "backends",
        "data_model",
        "config",
    },
    "": {"episode", "users", "backends", "data_model", "config"},
}
# what importing tau_bench_env, or making and stepping its env, must not load
TAU_MACHINERY = ("tau_bench_env.evaluation", "tau_bench_env.rescoring", "tau_bench_env.cli")


def tau_layer(path: Path) -> str:
    """The layer of a module file of tau_bench_env: its subpackage, ``config``, or ``""``."""
    parts = path.relative_to(TAU_PACKAGE).parts
    if len(parts) > 1:
        return parts[0]
    return "config" if parts[0] == "config.py" else ""


def test_tau_layers_cover_every_subpackage() -> None:
    found = {p.parent.name for p in TAU_PACKAGE.glob("*/__init__.py")}
    assert found | {"config", ""} == set(TAU_ALLOWED)


def test_tau_layer_imports_point_one_way() -> None:
    offences = []
    for path in sorted(TAU_PACKAGE.rglob("*.py")):
        layer = tau_layer(path)
        for name in imported_modules(path):
            parts = name.split(".")
            if parts[0] != "tau_bench_env":
                continue
            target = parts[1] if len(parts) > 1 else "the facade"
            if target not in TAU_ALLOWED[layer]:
                offences.append(f"{path.relative_to(TAU_PACKAGE.parent)} imports {name}")
    assert offences == []


def test_architecture_map_shows_every_subpackage() -> None:
    # docs/architecture.md's folder tree names each package's subpackages, and no others
    text = (PACKAGE.parent / "docs" / "architecture.md").read_text()
    tree = text.split("```")[1]
    for package in (PACKAGE, TAU_PACKAGE):
        found = {p.parent.name for p in package.glob("*/__init__.py")}
        listed = set()
        inside = False
        for line in tree.splitlines():
            if not line.startswith(" "):
                inside = line.split()[0] == f"{package.name}/" if line.strip() else False
            elif inside and line.split()[0].endswith("/"):
                listed.add(line.split()[0].rstrip("/"))
        assert listed == found, package.name


def test_skyrl_rewards_never_imports_tau_bench_env() -> None:
    # one way between the packages: tau_bench_env -> skyrl_rewards (lazy imports included)
    offences = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for name in imported_modules(path)
        if name.split(".")[0] == "tau_bench_env"
    ]
    assert offences == []


def test_the_env_loads_no_evaluation_or_rescoring() -> None:
    probe = (
        """
import sys
import skyrl_gym
import tau_bench_env
from tau_bench_env.backends import load_domain
task = load_domain("tau2", "airline").tasks("base")[0]
config = {"backend": "tau2", "domain": "airline", "user": {"kind": "replay"}}
env = skyrl_gym.make("tau_bench", env_config=config, extras={"task": task.to_dict(), "user_turns": ["Hi"]})
env.init([])
out = env.step("Hello, how can I help?")
assert out["done"], out
"""
        + f"print(sorted(m for m in sys.modules if m.startswith({TAU_MACHINERY!r})))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


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
        "import skyrl_rewards.rewards.text.math_child",
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
    # `pip install .` (not editable): the wheel alone finds the bundled `rec.yaml` from any directory
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
        "cfg = load_pool_config('rec.yaml')\n"
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
