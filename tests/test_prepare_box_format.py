"""SkyRL data preparation for a named model family: box_format column, grounding prompt, grid check."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import skyrl_gym
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from skyrl_rewards.rewards.geometry.box_formats import FAMILIES, BoxFormatChoice
from skyrl_rewards.rewards.registry import build_component
from skyrl_rewards.train.dataset import GROUNDING, prepare_data
from skyrl_rewards.train.env import ENV_ID

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


@pytest.mark.parametrize(
    ("settings", "patch"),
    [({"max_pixels": 20_000}, 14), ({"patch_size": 16}, 16), ({"min_pixels": 200_000}, 14)],
)
def test_prepared_rows_carry_the_engines_settings_and_score_right_with_a_default_reward(
    settings: dict, patch: int, tmp_path: Path
) -> None:
    """Rows without a grid, prepared with the engine's settings; the reward is left at its defaults.

    The answer is the truth in the pixels of the input the real image processor makes at
    those settings. Without the row's ``image_resize`` the default reward reads it wrong.
    """
    rows = [json.loads(line) for line in REC.read_text().splitlines()[:4]]
    for row in rows:
        row.pop("image_grid_thw", None)
    source = tmp_path / "rec.jsonl"
    (tmp_path / "images").symlink_to(REC.parent / "images")
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    prepared = prepared_rows(tmp_path, BoxFormatChoice.build("qwen2_5_vl", **settings), source)
    engine = Qwen2VLImageProcessorPil(**{"patch_size": 14, "merge_size": 2, **settings})
    iou = build_component("iou")  # default bounds, patch 14
    in_process = {"in_process": True, "rewards": {"iou": {"weight": 1.0}}}
    changed = 0
    for row in prepared:
        assert row["image_resize"]["patch_size"] == patch
        assert row["image_resize"] == {
            "patch_size": patch,
            "merge_size": 2,
            "min_pixels": settings.get("min_pixels", 3136),
            "max_pixels": settings.get("max_pixels", 12845056),
        }
        image = Image.open(row["image_path"])
        _, h, w = engine(images=[image], return_tensors="np")["image_grid_thw"][0].tolist()
        sx, sy = w * patch / image.width, h * patch / image.height
        truth = json.loads(row["reward_spec"]["ground_truth"].split("<answer>")[1].split("<")[0])
        answer = [truth[0] * sx, truth[1] * sy, truth[2] * sx, truth[3] * sy]
        sample = {**row, "solution": row["reward_spec"]["ground_truth"]}
        sample["completion"] = f"<answer>{[round(v, 3) for v in answer]}</answer>"
        assert iou.score(sample).value > 0.99, (row["image_path"], answer)
        # the SkyRL env gets the parquet row's columns as extras, image_resize included
        extras = {k: v for k, v in row.items() if k not in ("prompt", "data_source")}
        env = skyrl_gym.make(ENV_ID, env_config=in_process, extras=extras)
        env.init(row["prompt"])
        assert env.step(sample["completion"])["reward"] > 0.99
        without = {k: v for k, v in sample.items() if k != "image_resize"}
        default_grid = FAMILIES["qwen2_5_vl"].grid(image.width, image.height)
        if (patch, h, w) != (14, *default_grid[1:]):  # the settings change this image's input
            assert iou.score(without).value < 0.95
            changed += 1
    assert changed >= 2


def test_a_relative_family_carries_no_resize(tmp_path: Path) -> None:
    rows = prepared_rows(tmp_path, BoxFormatChoice.build("qwen3_vl"))
    assert {row["image_resize"] is None for row in rows} == {True}


def test_the_script_takes_the_towers_patch_size(tmp_path: Path) -> None:
    """Rows whose grids a patch-16 tower made (the real processor's) are refused at patch 14
    and prepared with ``--patch-size 16``, which every row then carries."""
    tower = Qwen2VLImageProcessorPil(patch_size=16, merge_size=2)
    rows = [json.loads(line) for line in REC.read_text().splitlines()[:4]]
    for row in rows:
        image = Image.open(REC.parent / row["image_path"])
        row["image_grid_thw"] = tower(images=[image], return_tensors="np")["image_grid_thw"][
            0
        ].tolist()
    source = tmp_path / "rec.jsonl"
    (tmp_path / "images").symlink_to(REC.parent / "images")
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, str(ROOT / "scripts" / "data" / "prepare_skyrl_data.py")]
        command += ["--input", str(source), "--out-dir", str(tmp_path / "out"), "--box-format"]
        return subprocess.run(
            command + list(args), capture_output=True, text=True, timeout=120, cwd=ROOT
        )

    refused = run("resized_pixels")
    assert refused.returncode == 1 and "image_grid_thw: the row's grid" in refused.stderr
    done = run("resized_pixels", "--patch-size", "16")
    assert done.returncode == 0, done.stderr
    prepared = pq.read_table(tmp_path / "out" / "train.parquet").to_pylist()
    assert {row["image_resize"]["patch_size"] for row in prepared} == {16}
