"""Files that ship with the package: the ``configs/`` of the repository and the sample data.

The wheel carries the repository's ``configs/*.yaml`` as the package
``skyrl_rewards.configs``, so ``--config configs/rec.yaml`` (or ``rec.yaml``)
works from any directory after a plain ``pip install .``, not only in a
checkout.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
SAMPLE_DATA = _PACKAGE / "sample_data"
"""The bundled sample datasets (``rec.jsonl``, ``detection.jsonl``, ``math.jsonl``) and images."""


def configs_dir() -> Path:
    """The bundled configs: ``skyrl_rewards/configs`` in an installed wheel, ``configs/`` in a checkout."""
    installed = _PACKAGE / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


def config_file(path: str | Path) -> Path:
    """``path`` when it exists; otherwise the bundled config of the same file name.

    Raises ``FileNotFoundError`` naming ``path`` and the bundled configs when
    neither exists.

    >>> config_file("configs/rec.yaml").name
    'rec.yaml'
    """
    path = Path(path)
    if path.exists():
        return path
    bundled = configs_dir() / path.name
    if path.suffix in (".yaml", ".yml") and bundled.is_file():
        return bundled
    names = sorted(p.name for p in configs_dir().glob("*.yaml"))
    raise FileNotFoundError(f"{path}: no such config file; bundled configs: {', '.join(names)}")
