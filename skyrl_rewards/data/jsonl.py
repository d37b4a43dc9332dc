"""Scoring rows in JSONL files: read and validate them, turn them into samples, write results.

A row is one JSON object per line with at least ``completion`` (the model's
text, or a message list) and ``solution`` (the ground truth), plus any dataset
columns the rewards read (``image_path``, ``image_grid_thw``,
``accu_reward_method``, ...). A relative ``image_path`` (a string, or a list
whose first element is the path) is relative to the JSONL file.

Messages name a row by its line in the file, counted from 1 (blank lines
count as lines): ``rows.jsonl line 3 (id rec-003): missing field 'completion'``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

REQUIRED_FIELDS = ("completion", "solution")


def read_numbered_rows(path: str | Path) -> tuple[list[dict[str, Any]], list[int]]:
    """The rows of a JSONL file and the 1-based line number of each; blank lines are skipped.

    Raises ``ValueError`` naming the line when a line is not a JSON object,
    ``FileNotFoundError`` when the file does not exist.
    """
    rows: list[dict[str, Any]] = []
    lines: list[int] = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path} line {lineno}: not valid JSON ({e.msg})") from e
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path} line {lineno}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
            lines.append(lineno)
    return rows, lines


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file into dicts; blank lines are skipped (errors as :func:`read_numbered_rows`)."""
    return read_numbered_rows(path)[0]


def row_label(row: Mapping[str, Any], index: int) -> str:
    """A row by its 0-based index: ``row 3 (id rec-003)`` (for rows that have no file line)."""
    return f"row {index} (id {row['id']})" if "id" in row else f"row {index}"


def line_label(row: Mapping[str, Any], line: int) -> str:
    """How file messages name a row, by its 1-based line: ``line 3 (id rec-003)``, or ``line 3``.

    >>> line_label({"id": "a"}, 3)
    'line 3 (id a)'
    """
    return f"line {line} (id {row['id']})" if "id" in row else f"line {line}"


def resolve_image_path(value: Any, base_dir: Path) -> Any:
    """``value`` with a relative image path made absolute against ``base_dir``.

    Accepts a path string or a list whose first element is the path (VLM-R1's
    multi-image form); any other value is returned unchanged.
    """
    if isinstance(value, str):
        return str(base_dir / value) if not Path(value).is_absolute() else value
    if isinstance(value, list) and value and isinstance(value[0], str):
        return [resolve_image_path(value[0], base_dir), *value[1:]]
    return value


def to_sample(row: Mapping[str, Any], line: int, base_dir: Path) -> dict[str, Any]:
    """The sample a reward mix scores for ``row`` (at file line ``line``): its columns, image path resolved.

    Raises ``ValueError`` naming the line and the field when ``completion`` or
    ``solution`` is missing.
    """
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise ValueError(f"{line_label(row, line)}: missing field '{name}'")
    sample = dict(row)
    if "image_path" in sample:
        sample["image_path"] = resolve_image_path(sample["image_path"], base_dir)
    return sample


def to_samples(
    rows: Sequence[Mapping[str, Any]], base_dir: Path, lines: Sequence[int] | None = None
) -> list[dict[str, Any]]:
    """:func:`to_sample` for every row; ``lines`` are their file lines (default 1, 2, ...)."""
    lines = lines if lines is not None else range(1, len(rows) + 1)
    return [to_sample(row, line, base_dir) for row, line in zip(rows, lines, strict=True)]


def positive_zero(value: Any) -> Any:
    """``value`` with every ``-0.0`` (in nested dicts and lists) made ``0.0``.

    >>> positive_zero({"a": [-0.0, 1.0]})
    {'a': [0.0, 1.0]}
    """
    if isinstance(value, float):
        return 0.0 if value == 0.0 else value
    if isinstance(value, dict):
        return {key: positive_zero(item) for key, item in value.items()}
    if isinstance(value, list):
        return [positive_zero(item) for item in value]
    return value


def check_writable(path: str | Path) -> Path:
    """``path`` if a file can be written there, else ``ValueError`` saying why (before any work).

    Refuses a directory, a parent that is a file or cannot be created, and a
    place this process may not write. Creates the parent folder.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(
            f"--output {path}: is a directory; name a file such as {path / 'scores.jsonl'}"
        )
    existing = next(folder for folder in (path.parent, *path.parent.parents) if folder.exists())
    if not existing.is_dir():
        raise ValueError(f"--output {path}: {existing} is a file, not a folder")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"--output {path}: cannot create its folder ({e.strerror or e})") from e
    target = path if path.exists() else path.parent
    if not os.access(target, os.W_OK):
        raise ValueError(f"--output {path}: {target} is not writable")
    return path


def write_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write dicts as JSONL (UTF-8), creating the parent folder; ``-0.0`` is written as ``0.0``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(positive_zero(row), ensure_ascii=False) + "\n")
