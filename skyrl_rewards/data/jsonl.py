"""Scoring rows in JSONL files: read and validate them, turn them into samples, write results.

A row is one JSON object per line with at least ``completion`` (the model's
text, or a message list) and ``solution`` (the ground truth), plus any dataset
columns the rewards read (``image_path``, ``image_grid_thw``,
``accu_reward_method``, ...). A relative ``image_path`` (a string, or a list
whose first element is the path) is relative to the JSONL file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

REQUIRED_FIELDS = ("completion", "solution")


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """Read a JSONL file into dicts; blank lines are skipped.

    Raises ``ValueError`` naming the line when a line is not a JSON object,
    ``FileNotFoundError`` when the file does not exist.
    """
    rows = []
    with Path(path).open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from e
            if not isinstance(row, dict):
                raise ValueError(
                    f"{path}:{lineno}: expected a JSON object, got {type(row).__name__}"
                )
            rows.append(row)
    return rows


def row_label(row: Mapping[str, Any], index: int) -> str:
    """How messages name a row: ``row 3 (id rec-003)``, or ``row 3`` without an id."""
    return f"row {index} (id {row['id']})" if "id" in row else f"row {index}"


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


def to_sample(row: Mapping[str, Any], index: int, base_dir: Path) -> dict[str, Any]:
    """The sample a reward mix scores for ``row``: its columns, image path resolved.

    Raises ``ValueError`` naming the field and the row when ``completion`` or
    ``solution`` is missing.
    """
    for name in REQUIRED_FIELDS:
        if name not in row:
            raise ValueError(f"{row_label(row, index)}: missing field '{name}'")
    sample = dict(row)
    if "image_path" in sample:
        sample["image_path"] = resolve_image_path(sample["image_path"], base_dir)
    return sample


def to_samples(rows: Iterable[Mapping[str, Any]], base_dir: Path) -> list[dict[str, Any]]:
    """:func:`to_sample` for every row (index from 0)."""
    return [to_sample(row, i, base_dir) for i, row in enumerate(rows)]


def write_rows(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Write dicts as JSONL (UTF-8), creating the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
