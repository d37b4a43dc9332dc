"""Pre-flight check of a dataset before training: rows that would score as dataset errors.

For every row, in this process (no Ray needed):

1. ``solution`` is present;
2. each image named by ``image_path`` exists and Pillow can read it;
3. every configured reward scores the row (its ``completion``, or the
   solution itself when the row has no completion) without an ``error`` or
   ``timeout`` outcome: a malformed ground truth, a missing image size, a
   grid that is not the processor's or a wrong column shows up here, named
   by component;
4. its boxes fit the box format the mix's box rewards read it in
   (:mod:`~skyrl_rewards.data.box_fit`): a ground truth inside its image, a
   reference completion's box that lands on the ground truth in the declared
   format rather than in another.

The result is a list of :class:`Problem`, each naming the row by its line
in the file (from 1); an empty list means the file is ready.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, UnidentifiedImageError

from skyrl_rewards.data.box_fit import box_fit_problems
from skyrl_rewards.data.jsonl import resolve_image_path
from skyrl_rewards.rewards.contract.result import MASKING_STATUSES, Status
from skyrl_rewards.rewards.mix import RewardMix


@dataclass(frozen=True)
class Problem:
    """One reason a row would be a dataset error; ``line`` is the row's line in the file (from 1)."""

    line: int
    row_id: str
    field: str
    message: str

    def __str__(self) -> str:
        label = f"line {self.line}" + (f" (id {self.row_id})" if self.row_id else "")
        return f"{label}: {self.field}: {self.message}"


def _image_paths(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def check_image(path: str) -> str:
    """Empty string when ``path`` is a readable image, else why not."""
    try:
        with Image.open(path) as image:
            image.verify()
    except FileNotFoundError:
        return f"image not found: {path}"
    except (UnidentifiedImageError, OSError, SyntaxError) as e:
        return f"image unreadable: {path} ({e})"
    return ""


def check_row(row: Mapping[str, Any], line: int, base_dir: Path, mix: RewardMix) -> list[Problem]:
    """Every problem of the row at file line ``line`` (see the module docstring)."""
    row_id = str(row.get("id", ""))
    if "solution" not in row:
        return [Problem(line, row_id, "solution", "missing field")]
    problems = []
    bad_images = []
    sample = dict(row)
    if "image_path" in row:
        sample["image_path"] = resolve_image_path(row["image_path"], base_dir)
        for path in _image_paths(sample["image_path"]):
            if message := check_image(path):
                problems.append(Problem(line, row_id, "image_path", message))
                bad_images.append(path)
    sample.setdefault("completion", row["solution"])
    result = mix.score(sample)
    for name, status in result.status.items():
        if Status(status) in MASKING_STATUSES:
            message = result.errors.get(name, status)
            if any(path in message for path in bad_images):
                continue  # a reward that failed on an image already reported: said once
            problems.append(Problem(line, row_id, name, f"{status}: {message}"))
    for field, message in box_fit_problems({**sample, "completion": row.get("completion")}, mix):
        problems.append(Problem(line, row_id, field, message))
    return problems


def check_rows(
    rows: Sequence[Mapping[str, Any]],
    base_dir: Path,
    mix: RewardMix,
    lines: Sequence[int] | None = None,
) -> list[Problem]:
    """Problems of all rows, in row order; ``lines`` are their file lines (default 1, 2, ...)."""
    lines = lines if lines is not None else range(1, len(rows) + 1)
    return [
        problem
        for row, line in zip(rows, lines, strict=True)
        for problem in check_row(row, line, base_dir, mix)
    ]
