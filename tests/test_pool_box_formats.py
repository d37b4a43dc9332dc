"""Box formats through a real reward pool: rows of several model families in one batch."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from PIL import Image

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix

REWARDS = {
    "iou": {"weight": 1.0},  # qwen2_5_vl unless the row says otherwise
    "detection": {"weight": 1.0, "box_format": "qwen3_vl"},
    "format_rec": {"weight": 1.0},
}
TRUTH = "<answer>[480, 270, 1440, 810]</answer>"  # the middle of a 1920x1080 image
DETECTIONS = '```json\n[{"bbox_2d": [480, 270, 1440, 810], "label": "cat"}]\n```'


def answer(box: list[float]) -> str:
    return f'<think>t</think><answer>{{"bbox_2d": {box}}}</answer>'


def detection_answer(box: list[float]) -> str:
    return f'<answer>```json\n[{{"bbox_2d": {box}, "label": "cat"}}]\n```</answer>'


@pytest.fixture(scope="module")
def photo(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("images") / "photo.png"
    Image.new("RGB", (1920, 1080)).save(path)
    return str(path)


@pytest.fixture(scope="module")
def pool(ray_module: None) -> Iterator[RewardPool]:
    config = {"name": "test_pool_box_formats", "num_workers": 2, "rewards": REWARDS}
    with RewardPool.from_config(config) as reward_pool:
        yield reward_pool


def test_rows_of_several_families_score_in_one_batch(pool: RewardPool, photo: str) -> None:
    rows = [
        # Qwen2.5-VL: pixels of its 1932x1092 input; the grid is computed from the image
        {"completion": answer([483, 273, 1449, 819]), "solution": TRUTH, "image_path": photo},
        # a Qwen3-VL row in the same batch names its format
        {
            "completion": answer([250, 250, 750, 750]),
            "solution": TRUTH,
            "image_path": photo,
            "box_format": "qwen3_vl",
        },
        # the same Qwen3-VL answer without the column is read as Qwen2.5-VL pixels: wrong
        {"completion": answer([250, 250, 750, 750]), "solution": TRUTH, "image_path": photo},
        # a grid from other resize settings: a dataset error, masked, whatever the answer
        {
            "completion": answer([483, 273, 1449, 819]),
            "solution": TRUTH,
            "image_path": photo,
            "image_grid_thw": [1, 20, 30],
        },
    ]
    detection_rows = [
        {**row, "solution": DETECTIONS, "completion": detection_answer([250, 250, 750, 750])}
        for row in rows[:1]
    ]
    samples = [*rows, *detection_rows] * 8  # a GRPO-group-sized batch
    results = pool.score(samples)
    mix = RewardMix.from_config(REWARDS)
    expected = [mix.score(sample) for sample in samples]
    assert [r.components for r in results] == [e.components for e in expected]
    assert [r.status for r in results] == [e.status for e in expected]
    first = results[:5]
    assert first[0].components["iou"] == pytest.approx(1.0)
    assert first[1].components["iou"] == 1.0
    assert first[2].components["iou"] < 0.25
    assert first[3].status["iou"] == "error" and first[3].should_mask
    assert "image_grid_thw: the row's grid [1, 20, 30]" in first[3].errors["iou"]
    assert first[4].components["detection"] == pytest.approx(1.0)  # the reward's qwen3_vl


def test_boxes_past_the_grid_score_clamped_and_are_counted(pool: RewardPool, photo: str) -> None:
    """A Qwen3-VL box past 1000 (QwenLM/Qwen3-VL#1741) scores as its clamped box, and is counted.

    The count crosses the workers and the work cache: on each result
    (``clamped``) and in the pool's ``clamped_boxes``.
    """
    edge = "<answer>[480, 270, 1920, 810]</answer>"  # (250, 250, 1000, 750) on the grid
    edge_detections = '```json\n[{"bbox_2d": [480, 270, 1920, 810], "label": "cat"}]\n```'
    qwen3 = {"solution": edge, "image_path": photo, "box_format": "qwen3_vl"}
    rows = [
        {**qwen3, "completion": answer([250, 250, 1004, 750])},  # x2 past the grid
        {**qwen3, "completion": answer([250, 250, 1000, 750])},  # on the grid: nothing counted
        {  # the detection reward's own qwen3_vl: two boxes, both past the grid
            "completion": '<answer>```json\n[{"bbox_2d": [250, 250, 1004, 750], "label": "cat"}, '
            '{"bbox_2d": [-2, 250, 1000, 750], "label": "cat"}]\n```</answer>',
            "solution": edge_detections,
            "image_path": photo,
        },
    ]
    before = pool.metrics()["clamped_boxes"]
    results = pool.score(rows * 4)  # the repeats are answered from the work cache
    mix = RewardMix.from_config(REWARDS)
    assert [r.clamped for r in results] == [mix.score(row).clamped for row in rows * 4]
    assert [r.clamped for r in results[:3]] == [{"iou": 1}, {}, {"detection": 2}]
    assert results[0].components["iou"] == results[1].components["iou"] == pytest.approx(1.0)
    assert pool.metrics()["clamped_boxes"] - before == 3 * 4
