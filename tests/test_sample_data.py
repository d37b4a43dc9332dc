"""The shipped sample data: reproducible, small, consistent, and a real spread of rewards."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from PIL import Image

from skyrl_rewards.data.check import check_rows
from skyrl_rewards.data.jsonl import read_rows, to_samples
from skyrl_rewards.pool.config import load_pool_config
from skyrl_rewards.rewards.mix import RewardMix

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
TASKS = {  # sample file -> the reward mix it is scored with in the README
    "rec": ROOT / "configs" / "rec.yaml",
    "detection": ROOT / "configs" / "detection.yaml",
    "math": ROOT / "configs" / "math.yaml",
}


def _load_script():
    spec = importlib.util.spec_from_file_location(
        "make_sample_data", ROOT / "scripts" / "samples" / "make_sample_data.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_script_reproduces_the_shipped_files(tmp_path: Path) -> None:
    _load_script().make_sample_data(tmp_path)
    for task in TASKS:
        assert (tmp_path / f"{task}.jsonl").read_text() == (SAMPLE / f"{task}.jsonl").read_text(), (
            task
        )
    shipped = sorted(p.name for p in (SAMPLE / "images").glob("*.png"))
    assert shipped == sorted(p.name for p in (tmp_path / "images").glob("*.png"))
    for name in shipped:
        with Image.open(SAMPLE / "images" / name) as a, Image.open(tmp_path / "images" / name) as b:
            assert a.size == b.size and a.convert("RGB").tobytes() == b.convert("RGB").tobytes(), (
                name
            )


@pytest.mark.parametrize("task", sorted(TASKS))
def test_rows_are_complete_and_images_small(task: str) -> None:
    rows = read_rows(SAMPLE / f"{task}.jsonl")
    assert 20 <= len(rows) <= 40
    assert len({row["id"] for row in rows}) == len(rows)
    for row in rows:
        assert {"id", "problem", "solution", "completion"} <= set(row), row["id"]
        if "image_path" in row:
            path = SAMPLE / row["image_path"]
            assert not Path(row["image_path"]).is_absolute()  # relative to the JSONL file
            assert path.stat().st_size < 4096, path
            t, h, w = row["image_grid_thw"]
            with Image.open(path) as image:
                width, height = image.size
            # Qwen2-VL resize: each side rounded to a multiple of 28 px = 2 patches of 14 px
            assert (t, h, w) == (1, round(height / 28) * 2, round(width / 28) * 2), row["id"]


def test_package_data_globs_cover_the_sample_files() -> None:
    # pyproject ships sample_data/*.jsonl and sample_data/images/*.png: nothing may live elsewhere
    files = {p.relative_to(SAMPLE).as_posix() for p in SAMPLE.rglob("*") if p.is_file()}
    assert files and all(
        (f.endswith(".jsonl") and "/" not in f) or (f.startswith("images/") and f.endswith(".png"))
        for f in files
    ), files


@pytest.mark.parametrize("task", sorted(TASKS))
def test_sample_passes_check_and_spreads_every_component(task: str) -> None:
    """Scored with the real rewards, each component takes at least two values and nothing errors."""
    rewards = load_pool_config(TASKS[task]).rewards
    mix = RewardMix.from_config(rewards)
    rows = read_rows(SAMPLE / f"{task}.jsonl")
    assert check_rows(rows, SAMPLE, mix) == []
    results = [mix.score(sample) for sample in to_samples(rows, SAMPLE)]
    assert not any(r.should_mask for r in results), [r.to_dict() for r in results if r.should_mask]
    for name in mix.names:
        values = {round(r.components[name], 6) for r in results}
        assert len(values) >= 2, (name, values)
    json.dumps([r.to_dict() for r in results])  # results are JSON-ready


CURATED = {  # hand-written samples of the vision rewards beyond VLM-R1: file -> its mix
    "gui": ROOT / "configs" / "gui.yaml",
    "docqa": ROOT / "configs" / "docqa.yaml",
}
CURATED_VALUES = {  # row id -> the value of the mix's first reward (gui_action, anls)
    "gui-000": 1.0,  # Qwen2.5-VL pixels converted into the Sign-in box
    "gui-001": 0.0,  # the wrong button
    "gui-002": 0.0,  # just past the box's edge
    "gui-003": 0.0,  # outside the 20 px radius
    "gui-004": 1.0,  # token F1 0.5
    "gui-005": 0.0,  # the wrong direction
    "gui-006": 1.0,  # an alias of press_back
    "gui-007": 0.0,  # no action
    "docqa-000": 1.0,  # one of two gold answers
    "docqa-001": 0.875,
    "docqa-002": 0.888889,
    "docqa-003": 0.0,  # NL past 0.5
    "docqa-004": 0.0,  # empty answer
    "docqa-005": 1.0,
    "docqa-006": 0.9375,
    "docqa-007": 0.970588,
}


@pytest.mark.parametrize("task", sorted(CURATED))
def test_curated_samples_pass_check_and_score_as_written(task: str) -> None:
    mix = RewardMix.from_config(load_pool_config(CURATED[task]).rewards)
    rows = read_rows(SAMPLE / f"{task}.jsonl")
    assert 8 <= len(rows) <= 40 and len({row["id"] for row in rows}) == len(rows)
    assert check_rows(rows, SAMPLE, mix) == []
    results = [mix.score(sample) for sample in to_samples(rows, SAMPLE)]
    assert not any(r.should_mask for r in results)
    first = mix.names[0]
    assert {
        row["id"]: round(r.components[first], 6) for row, r in zip(rows, results, strict=True)
    } == {key: value for key, value in CURATED_VALUES.items() if key.startswith(task)}
    for name in mix.names:
        assert len({round(r.components[name], 6) for r in results}) >= 2, name
