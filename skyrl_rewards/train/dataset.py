"""SkyRL prompt rows from this project's JSONL rows, written as parquet for ``PromptDataset``.

A JSONL row (``problem``, ``solution`` and columns, as in
``skyrl_rewards/sample_data``) becomes one SkyRL row: ``prompt`` (a user
message: the problem with VLM-R1's think/answer instruction, preceded by the
image as a data URI when the row has one), ``env_class``,
``reward_spec: {method: rule, ground_truth: solution}`` and the row's other
columns as top-level fields (``image_path`` made absolute), which SkyRL hands
to the env as ``extras``. ``scripts/prepare_skyrl_data.py`` is the command.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from skyrl_rewards.data.jsonl import line_label, read_numbered_rows, resolve_image_path

NOT_COLUMNS = frozenset({"problem", "solution", "completion"})
QUESTION_TEMPLATE = (
    "{problem} First output the thinking process in <think> </think> tags and then output the "
    "final answer in <answer> </answer> tags."
)
"""VLM-R1's instruction after the question: what the format rewards pay for."""


def image_data_uri(path: str | Path) -> str:
    """A ``data:image/...;base64,`` URI of the image file (for OpenAI-format image messages)."""
    path = Path(path)
    kind = path.suffix.lstrip(".").lower().replace("jpg", "jpeg") or "png"
    return f"data:image/{kind};base64," + base64.b64encode(path.read_bytes()).decode("ascii")


def skyrl_record(
    row: Mapping[str, Any], line: int, base_dir: Path, env_class: str, data_source: str
) -> dict[str, Any]:
    """One SkyRL prompt row from a dataset row at 1-based file ``line`` (module docstring).

    Raises ``ValueError`` naming the field and the line when ``problem`` or
    ``solution`` is missing, ``FileNotFoundError`` when the image is.
    """
    for name in ("problem", "solution"):
        if name not in row:
            raise ValueError(f"{data_source} {line_label(row, line)}: missing field '{name}'")
    columns = {k: v for k, v in row.items() if k not in NOT_COLUMNS}
    question = QUESTION_TEMPLATE.format(problem=row["problem"])
    content: str | list[dict[str, Any]] = question
    if "image_path" in row:
        image_path = resolve_image_path(row["image_path"], base_dir)
        columns["image_path"] = image_path
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


def write_parquet(records: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Write records as a parquet file (nested prompts as JSON-compatible structs)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in records]), path)


def prepare_data(
    input_path: Path, out_dir: Path, env_class: str, *, val_fraction: float = 0.25
) -> tuple[Path, Path]:
    """Write ``train.parquet`` and ``validation.parquet`` under ``out_dir``; return their paths.

    The last ``val_fraction`` of the rows (at least one) is the validation
    split; a single row is both. Raises ``ValueError`` for an empty input.
    """
    rows, lines = read_numbered_rows(input_path)
    if not rows:
        raise ValueError(f"{input_path}: no rows")
    base_dir = input_path.resolve().parent
    records = [
        skyrl_record(row, line, base_dir, env_class, input_path.stem)
        for row, line in zip(rows, lines, strict=True)
    ]
    n_val = max(1, int(len(records) * val_fraction)) if len(records) > 1 else 0
    train, val = out_dir / "train.parquet", out_dir / "validation.parquet"
    write_parquet(records[: len(records) - n_val], train)
    write_parquet(records[len(records) - n_val :] or records, val)
    return train, val
