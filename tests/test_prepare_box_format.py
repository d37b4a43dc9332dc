"""SkyRL data preparation for a named model family: box_format column, grounding prompt, grid check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from skyrl_rewards.rewards.geometry.box_formats import BoxFormatChoice
from skyrl_rewards.train.dataset import GROUNDING, prepare_data

ROOT = Path(__file__).resolve().parents[1]
REC = ROOT / "skyrl_rewards" / "sample_data" / "rec.jsonl"


def prepared_rows(tmp_path: Path, box_format: BoxFormatChoice | None, source: Path = REC) -> list:
    train, val = prepare_data(source, tmp_path / "out", "skyrl_rewards", box_format=box_format)
    return pq.read_table(train).to_pylist() + pq.read_table(val).to_pylist()


def question(row: dict) -> str:
    (message,) = row["prompt"]
    return next(part["text"] for part in message["content"] if part["type"] == "text")


@pytest.mark.parametrize(
    ("family", "instruction"),
    [
        ("qwen3_vl", "on a 0-1000 scale relative to the image's width and height."),
        ("qwen2_5_vl", "tags. Output the final answer in JSON format."),  # VLM-R1's own
        ("relative_1", "in fractions of the image's width and height, from 0 to 1."),
        ("original", "in pixels of the 200x150 image."),  # rec_000.png is 200x150
    ],
)
def test_a_family_names_every_row_and_asks_for_its_coordinates(
    family: str, instruction: str, tmp_path: Path
) -> None:
    rows = prepared_rows(tmp_path, BoxFormatChoice.build(family))
    assert len(rows) == 24 and {row["box_format"] for row in rows} == {family}
    assert question(rows[0]).endswith(instruction)
    assert rows[0]["prompt"][0]["content"][0]["image_url"]["url"].startswith("data:image/png")


def test_without_a_family_rows_are_as_before(tmp_path: Path) -> None:
    rows = prepared_rows(tmp_path, None)
    assert "box_format" not in rows[0]
    assert not any(text in question(rows[0]) for text in GROUNDING.values())


def test_a_rows_own_format_wins_and_a_grid_of_other_settings_names_the_line(
    tmp_path: Path,
) -> None:
    rows = [json.loads(line) for line in REC.read_text().splitlines()[:3]]
    rows[0]["box_format"] = "qwen2_5_vl"
    rows[1]["image_path"] = str(REC.parent / rows[1]["image_path"])
    rows[2]["image_path"] = str(REC.parent / rows[2]["image_path"])
    source = tmp_path / "mixed.jsonl"
    (tmp_path / "images").symlink_to(REC.parent / "images")
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = prepared_rows(tmp_path, BoxFormatChoice.build("qwen3_vl"), source)
    assert [r["box_format"] for r in prepared] == ["qwen2_5_vl", "qwen3_vl", "qwen3_vl"]
    assert question(prepared[0]).endswith("Output the final answer in JSON format.")
    rows[1]["image_grid_thw"] = [1, 20, 30]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"mixed line 2 \(id rec-001\): image_grid_thw: the row's"):
        prepared_rows(tmp_path, BoxFormatChoice.build("qwen2_5_vl"), source)


def test_the_script_takes_the_family_and_the_engines_pixel_bounds(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(ROOT / "scripts" / "data" / "prepare_skyrl_data.py")]
        command += ["--input", str(REC), "--out-dir", str(tmp_path), *args]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)

    done = run("--box-format", "qwen3_vl")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        str(tmp_path / "train.parquet"),
        str(tmp_path / "validation.parquet"),
    ]
    refused = run("--box-format", "qwen2_5_vl", "--max-pixels", "20000")
    assert refused.returncode == 1
    assert "rec line 1 (id rec-000): image_grid_thw: the row's grid [1, 10, 14]" in refused.stderr
    assert "which is [1, 8, 10]" in refused.stderr
