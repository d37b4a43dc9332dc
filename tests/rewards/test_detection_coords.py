"""Detection with images: boxes as written by default (VLM-R1), or converted from a box format on request."""

from __future__ import annotations

import json

import pytest
from PIL import Image

from skyrl_rewards.rewards.batch import make_reward


def block(boxes: list[list[float]]) -> str:
    items = [{"bbox_2d": box, "label": "cat"} for box in boxes]
    return f"<answer>```json\n{json.dumps(items)}\n```</answer>"


# A 640x480 image seen by Qwen2.5-VL as 644x476 pixels (a grid of 34 x 46 patches of 14 px):
TRUTH = block([[160, 120, 320, 240], [0, 0, 64, 48]])  # original-image pixels
SCALED = block([[161, 119, 322, 238], [0, 0, 64.4, 47.6]])  # the same boxes in model-input pixels
RELATIVE = block([[250, 250, 500, 500], [0, 0, 100, 100]])  # the same boxes on the 0-1000 grid
GRID = [1, 34, 46]


def test_default_compares_as_written_and_ignores_the_grid(image_640x480: str) -> None:
    reward = make_reward("detection")
    columns = {"image_grid_thw": [GRID], "image_path": [image_640x480]}
    assert reward([TRUTH], solution=[TRUTH], **columns) == [1.0]
    assert reward([RELATIVE], solution=[TRUTH], **columns)[0] < 0.5


@pytest.mark.parametrize("image_column", ["image_path", "image", "images"])
def test_model_input_boxes_are_scaled(image_column: str, image_640x480: str) -> None:
    pil = Image.open(image_640x480)
    value = {"image_path": image_640x480, "image": pil, "images": [pil]}[image_column]
    reward = make_reward("detection", box_coords="model_input")  # the former name
    rewards = reward([SCALED], solution=[TRUTH], image_grid_thw=[GRID], **{image_column: [value]})
    assert rewards == [pytest.approx(1.0)]
    qwen3 = make_reward("detection", box_format="qwen3_vl")
    assert qwen3([RELATIVE], solution=[TRUTH], **{image_column: [value]}) == [pytest.approx(1.0)]


@pytest.mark.parametrize(
    ("columns", "field"),
    [
        ({"image": "PIL", "image_grid_thw": [[1, 20, 30]]}, "image_grid_thw: the row's grid"),
        ({}, "image_path: missing; box_format 'resized_pixels' needs the row's image"),
        ({"image_grid_thw": [GRID]}, "image_path: missing; image_grid_thw is given"),
    ],
)
def test_model_input_without_image_and_grid_is_a_dataset_error(
    columns: dict, field: str, image_640x480: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    columns = {k: [Image.open(image_640x480)] if v == "PIL" else v for k, v in columns.items()}
    reward = make_reward("detection", box_coords="model_input")
    assert reward([SCALED], solution=[TRUTH], **columns) == [None]  # masked for TRL
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match=f"sample 0: {field}"):
        reward([SCALED], solution=[TRUTH], **columns)


@pytest.mark.parametrize(
    "params",
    [
        {"box_coords": "resized"},
        {"patch_size": 0},
        {"box_format": "qwen25_vl"},  # a typo: the error suggests qwen2_5_vl
        {"max_pixel": 100},  # a typo of max_pixels
        {"box_format": "original", "box_coords": "original"},  # old and new name at once
    ],
)
def test_bad_parameters_fail_at_build_time(params: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(params))):
        make_reward("detection", **params)
