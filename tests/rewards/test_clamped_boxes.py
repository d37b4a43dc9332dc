"""Relative boxes past their grid (Qwen3-VL writes past 1000, QwenLM/Qwen3-VL#1741): scored clamped, and counted.

Every box reward that converts relative coordinates scores a box past the grid
as the box clamped to it, and notes on its score how many boxes it clamped
(``ComponentScore.clamped``); a mix carries the count per component onto
``RewardResult.clamped``. An answer inside the grid counts 0.
"""

from __future__ import annotations

import json
import pickle

import pytest
from PIL import Image

from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult
from skyrl_rewards.rewards.geometry.box_formats import FAMILIES
from skyrl_rewards.rewards.geometry.converter import BoxConverter
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.registry import build_component

# a 2000x1000 image: on the 0-1000 grid x is doubled, y kept
TRUTH_BOX = [1000, 500, 2000, 1000]
"""The right half's lower half, in original pixels: (500, 500, 1000, 1000) on the grid."""
LABELLED = json.dumps([{"bbox_2d": TRUTH_BOX, "label": "cat"}])


def labelled(box: list[float]) -> str:
    return json.dumps([{"bbox_2d": box, "label": "cat"}])


CASES = {
    # reward: (params, solution, answer of a box)
    "iou": ({}, f"<answer>{TRUTH_BOX}</answer>", lambda b: f"<answer>{b}</answer>"),
    "giou": ({}, f"<answer>{TRUTH_BOX}</answer>", lambda b: f"<answer>{b}</answer>"),
    "detection": (
        {},
        f"```json\n{LABELLED}\n```",
        lambda b: f"<answer>```json\n{labelled(b)}\n```</answer>",
    ),
    "boxes_matched": (
        {},
        f"<answer>{LABELLED}</answer>",
        lambda b: f"<answer>{labelled(b)}</answer>",
    ),
    "coco_map": ({}, f"```json\n{LABELLED}\n```", lambda b: f"```json\n{labelled(b)}\n```"),
    "gui_action": (
        {"radius_px": 1},
        json.dumps({"action": "click", "point": [2000, 1000]}),
        lambda b: f"click({b[2]}, {b[3]})",  # the box's lower right corner
    ),
    # point and plane: the box converted once, counted once
    "gui_point": ({"form": "both"}, str(TRUTH_BOX), lambda b: str(b)),
}
PAST = [500, 500, 1004, 1000]
"""The right box with x2 past the grid: clamped it is (500, 500, 1000, 1000)."""
EDGE = [500, 500, 1000, 1000]


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("images") / "wide.png"
    Image.new("RGB", (2000, 1000)).save(path)
    return str(path)


@pytest.mark.parametrize("name", CASES)
def test_a_box_past_the_grid_scores_clamped_and_is_counted(name: str, image: str) -> None:
    params, solution, write = CASES[name]
    component = build_component(name, {**params, "box_format": "qwen3_vl"})

    def score(box: list[float]) -> ComponentScore:
        return component.score(
            {"completion": write(box), "solution": solution, "image_path": image}
        )

    past, edge = score(PAST), score(EDGE)
    assert past.status.value == edge.status.value == "ok", (past, edge)
    assert past.value == edge.value  # scored as the clamped box
    assert (past.clamped, edge.clamped) == (1, 0)  # counted; an answer inside the grid counts 0
    assert edge.value == pytest.approx(2.0 if name == "gui_point" else 1.0)  # the right box


def test_every_clamped_box_of_an_answer_counts(image: str) -> None:
    component = build_component("detection", {"box_format": "qwen3_vl"})
    boxes = [{"bbox_2d": box, "label": "cat"} for box in (PAST, [-3, 0, 10, 10], EDGE)]
    row = {
        "completion": f"<answer>```json\n{json.dumps(boxes)}\n```</answer>",
        "solution": f"```json\n{LABELLED}\n```",
        "image_path": image,
    }
    assert component.score(row).clamped == 2
    point = build_component("gui_point", {"box_format": "relative_1"})
    row = {"completion": "(1.2, 0.75)", "solution": str(TRUTH_BOX), "image_path": image}
    assert point.score(row).clamped == 1


def test_pixel_formats_and_text_rewards_count_nothing(image: str) -> None:
    iou = build_component("iou", {"box_format": "original"})
    row = {
        "completion": f"<answer>{[0, 0, 5000, 5000]}</answer>",
        "solution": f"<answer>{TRUTH_BOX}</answer>",
    }
    assert iou.score({**row, "image_path": image}).clamped == 0
    assert build_component("format", {}).score(row).clamped == 0


def test_a_mix_carries_the_count_per_component(image: str) -> None:
    mix = RewardMix.from_config(
        {"iou": {"box_format": "qwen3_vl"}, "giou": {"box_format": "qwen2_5_vl"}, "format": {}}
    )
    row = {
        "completion": f"<think>t</think><answer>{PAST}</answer>",
        "solution": f"<answer>{TRUTH_BOX}</answer>",
        "image_path": image,
    }
    result = mix.score(row)
    assert result.components["iou"] == 1.0
    assert result.clamped == {"iou": 1}  # giou reads Qwen2.5-VL pixels: nothing to clamp
    assert result.to_dict()["clamped"] == {"iou": 1}
    inside = mix.score({**row, "completion": f"<think>t</think><answer>{EDGE}</answer>"})
    assert inside.clamped == {} and inside.to_dict()["clamped"] == {}


def test_the_converter_counts_and_results_without_a_count_stay_valid() -> None:
    convert = BoxConverter(FAMILIES["relative_1000"], (2000, 1000))
    assert convert((500, 500, 1004, 1000)) == (1000.0, 500.0, 2000.0, 1000.0)
    assert convert((0, 0, 1000, 1000)) == (0.0, 0.0, 2000.0, 1000.0)
    assert convert.clamped == 1
    # positional constructors written before the count, and their pickles, keep working
    score = ComponentScore(0.5)
    assert score.clamped == 0 and pickle.loads(pickle.dumps(score)) == score
    result = RewardResult(1.0, {"iou": 1.0}, {}, {"iou": "ok"}, 0.1)
    assert result.clamped == {}
