"""SkyRL prompt rows from this project's JSONL rows, written as parquet for ``PromptDataset``.

A JSONL row (``problem``, ``solution`` and columns, as in
``skyrl_rewards/sample_data``) becomes one SkyRL row: ``prompt`` (a user
message: the problem with VLM-R1's think/answer instruction, preceded by the
image as a data URI when the row has one), ``env_class``,
``reward_spec: {method: rule, ground_truth: solution}`` and the row's other
columns as top-level fields (``image_path`` made absolute), which SkyRL hands
to the env as ``extras``. ``scripts/data/prepare_skyrl_data.py`` is the command.

With a box format (``box_format``: a model family such as ``qwen3_vl`` or
``qwen2_5_vl``, see :mod:`~skyrl_rewards.rewards.geometry.box_formats`) every row
gets a ``box_format`` column (a row's own wins), which the box rewards read,
and its question ends with the family's grounding instruction (the box in
JSON, in the coordinates that family answers in: :data:`GROUNDING`). A
row's ``image_grid_thw`` is checked against the family's resize then, so a
dataset prepared with other processor settings fails here, naming the line.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_rewards.data.jsonl import line_label, read_numbered_rows, resolve_image_path
from skyrl_rewards.rewards.geometry.box_formats import (
    BOX_FORMAT_COLUMN,
    ORIGINAL,
    RELATIVE_1,
    RELATIVE_1000,
    RESIZED_PIXELS,
    BoxFormatChoice,
    check_row_grid,
    row_image_size,
)
from skyrl_rewards.rewards.geometry.boxes import grid_thw

NOT_COLUMNS = frozenset({"problem", "solution", "completion"})
QUESTION_TEMPLATE = (
    "{problem} First output the thinking process in <think> </think> tags and then output the "
    "final answer in <answer> </answer> tags."
)
"""VLM-R1's instruction after the question: what the format rewards pay for."""

GROUNDING = {
    RESIZED_PIXELS: "Output the final answer in JSON format.",
    RELATIVE_1000: (
        "Output the final answer in JSON format, the box as [x1, y1, x2, y2] on a 0-1000 scale "
        "relative to the image's width and height."
    ),
    RELATIVE_1: (
        "Output the final answer in JSON format, the box as [x1, y1, x2, y2] in fractions of the "
        "image's width and height, from 0 to 1."
    ),
    ORIGINAL: (
        "Output the final answer in JSON format, the box as [x1, y1, x2, y2] in pixels of the "
        "{width}x{height} image."
    ),
}
"""The grounding instruction after VLM-R1's, by where the family's boxes live.

Qwen2.5-VL's is VLM-R1's own REC instruction (it answers in pixels of the
image as it sees it); the 0-1000 families are told their scale, as Qwen3-VL's
grounding prompts assume it; ``original`` is told the image's size.
"""


def image_data_uri(path: str | Path) -> str:
    """A ``data:image/...;base64,`` URI of the image file (for OpenAI-format image messages)."""
    path = Path(path)
    kind = path.suffix.lstrip(".").lower().replace("jpg", "jpeg") or "png"
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def skyrl_record(
    row: Mapping[str, Any],
    line: int,
    base_dir: Path,
    env_class: str,
    data_source: str,
    box_format: BoxFormatChoice | None = None,
) -> dict[str, Any]:
    """One SkyRL prompt row from a dataset row at 1-based file ``line`` (module docstring).

    Raises ``ValueError`` naming the field and the line when ``problem`` or
    ``solution`` is missing, or (with ``box_format``) for an unknown format, an
    unreadable image or a grid that is not the family's; ``FileNotFoundError``
    when the image is missing.
    """
    for name in ("problem", "solution"):
        if name not in row:
            raise ValueError(f"{data_source} {line_label(row, line)}: missing field '{name}'")
    columns = {k: v for k, v in row.items() if k not in NOT_COLUMNS}
    if "image_path" in row:
        columns["image_path"] = resolve_image_path(row["image_path"], base_dir)
    question = QUESTION_TEMPLATE.format(problem=row["problem"])
    if box_format is not None:
        try:
            question += " " + _grounding(columns, box_format)
        except ValueError as error:
            raise ValueError(f"{data_source} {line_label(row, line)}: {error}") from error
    content: str | list[dict[str, Any]] = question
    if "image_path" in row:
        image_path = columns["image_path"]
        first = image_path[0] if isinstance(image_path, list) else image_path
        content = [
            {"type": "image_url", "image_url": {"url": image_data_uri(first)}},
            {"type": "text", "text": question},
        ]
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": content}],
        "env_class": env_class,
        "reward_spec": {"method": "rule", "ground_truth": row["solution"]},
        **columns,
    }


def _grounding(columns: dict[str, Any], box_format: BoxFormatChoice) -> str:
    """The row's grounding instruction; sets its ``box_format`` column and checks its grid."""
    fmt = box_format.for_row(columns)
    columns[BOX_FORMAT_COLUMN] = fmt.name
    found = row_image_size(columns)
    if fmt.coords == RESIZED_PIXELS and found is not None:
        grid = columns.get("image_grid_thw")
        check_row_grid(None if grid is None else grid_thw(grid), found[0], fmt, found[1])
    if fmt.coords == ORIGINAL:
        if found is None:
            raise ValueError("image_path: missing; box_format 'original' tells the image's size")
        return GROUNDING[ORIGINAL].format(width=found[0][0], height=found[0][1])
    return GROUNDING[fmt.coords]


def write_parquet(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write records as a parquet file (nested prompts as JSON-compatible structs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in records]), path)


def prepare_data(
    input_path: Path,
    out_dir: Path,
    env_class: str,
    *,
    val_fraction: float = 0.25,
    box_format: BoxFormatChoice | None = None,
) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``validation.parquet`` under ``out_dir``; return their paths.

    The last ``val_fraction`` of the rows (at least one) is the validation
    split; a single row is both. ``box_format``: the policy's family (module
    docstring). Raises ``ValueError`` for an empty input or a bad row.
    """
    rows, lines = read_numbered_rows(input_path)
    if not rows:
        raise ValueError(f"{input_path}: no rows")
    base_dir = input_path.resolve().parent
    records = [
        skyrl_record(row, line, base_dir, env_class, input_path.stem, box_format)
        for row, line in zip(rows, lines, strict=True)
    ]
    n_val = max(1, int(len(records) * val_fraction)) if len(records) > 1 else 0
    train, val = out_dir / "train.parquet", out_dir / "validation.parquet"
    write_parquet(records[: len(records) - n_val], train)
    write_parquet(records[len(records) - n_val :] or records, val)
    return train, val
