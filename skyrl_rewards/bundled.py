"""Files that ship with the package: the ``configs/`` of the repository and the sample data.

The wheel carries the repository's ``configs/*.yaml`` as the package
``skyrl_rewards.configs``. A config is a path (``configs/rec.yaml`` in a
checkout, ``/abs/mine.yaml``) or, from any directory after a plain
``pip install .``, a bundled config named as such: its bare name (``rec``,
``rec.yaml``) or ``bundled:rec.yaml``. A path that does not exist is an
error, never a bundled config of the same file name.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent
SAMPLE_DATA = _PACKAGE / "sample_data"
"""The bundled sample datasets (``rec``, ``detection``, ``math``, ``gui``, ``docqa``, ``vqa``:
JSONL) and images. ``vqa`` has ``accu_reward_method: llm`` rows (for a judge config)."""

BUNDLED_PREFIX = "bundled:"
"""Prefix that names a bundled config explicitly: ``bundled:rec.yaml``."""


def configs_dir() -> Path:
    """The bundled configs: ``skyrl_rewards/configs`` in an installed wheel, ``configs/`` in a checkout."""
    installed = _PACKAGE / "configs"
    return installed if installed.is_dir() else _PACKAGE.parent / "configs"


def bundled_names() -> list[str]:
    """File names of the bundled configs, sorted (``pool.yaml``, ``rec.yaml``, ...)."""
    return sorted(p.name for p in configs_dir().glob("*.yaml"))


def config_file(path: str | Path) -> Path:
    """The config file that ``path`` names.

    ``path`` itself when it exists; a bundled config when ``path`` is
    ``bundled:NAME`` or a bare ``NAME`` (no directory part; ``.yaml`` may be
    left out) that no file in the working directory takes. Raises
    ``FileNotFoundError`` naming ``path`` and the bundled configs otherwise: a
    path with a directory part that does not exist never falls back.

    >>> config_file("bundled:rec").name
    'rec.yaml'
    """
    text = str(path)
    explicit = text.startswith(BUNDLED_PREFIX)
    if explicit:
        text = text.removeprefix(BUNDLED_PREFIX)
    elif Path(text).exists():
        return Path(text)
    candidate = Path(text)
    bare = candidate.name == text and text not in ("", ".", "..")
    if explicit or bare:
        name = text if candidate.suffix in (".yaml", ".yml") else f"{text}.yaml"
        bundled = configs_dir() / name
        if bundled.is_file():
            return bundled
        raise FileNotFoundError(
            f"{path}: no such config file and no bundled config of that name; bundled configs: "
            f"{', '.join(bundled_names())}"
        )
    hint = (
        f" (for the bundled one, name it {candidate.name} or {BUNDLED_PREFIX}{candidate.name})"
        if candidate.name in bundled_names()
        else ""
    )
    raise FileNotFoundError(
        f"{path}: no such config file{hint}; bundled configs: {', '.join(bundled_names())}"
    )


def describe(given: str | Path) -> str:
    """The file that ``given`` names, as the CLI reports it: absolute, ``(bundled)`` when it is one.

    >>> describe("bundled:rec").endswith("rec.yaml (bundled)")
    True
    """
    used = config_file(given).resolve()
    return str(used) if Path(given).exists() else f"{used} (bundled)"
