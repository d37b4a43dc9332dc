"""IoU with VLM-R1's pixel convention, and the REC reward's scaling to the original image."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PIL import Image

from skyrl_rewards import iou, iou_reward
from skyrl_rewards.rewards.geometry.boxes import image_size, predicted_box


@pytest.mark.parametrize(
    ("box1", "box2", "expected"),
    [
        ([0, 0, 10, 10], [0, 0, 10, 10], 1.0),  # identical
        # inter: x 5..9 (+1) = 5, y 5..9 (+1) = 5 -> 25; union 100 + 100 - 25
        ([0, 0, 10, 10], [5, 5, 15, 15], 25 / 175),
        # touching edges: x2-1 = 9 < 10, no overlap
        ([0, 0, 10, 10], [10, 0, 20, 10], 0.0),
        # overlap of exactly one pixel column: inter_x1 = 9, inter_x2 = 9 -> not strictly less -> 0
        ([0, 0, 10, 10], [9, 0, 20, 10], 0.0),
        # overlap of two columns: x 8..9 -> (9 - 8 + 1) = 2, y 0..9 -> 10 -> 20; union 100 + 120 - 20
        ([0, 0, 10, 10], [8, 0, 20, 10], 20 / 200),
        ([0, 0, 10, 10], [20, 20, 30, 30], 0.0),  # disjoint
        ([10, 10, 0, 0], [0, 0, 10, 10], 0.0),  # inverted
        ([0, 0, 0, 10], [0, 0, 10, 10], 0.0),  # zero width
        ([0, 0, math.nan, 10], [0, 0, 10, 10], 0.0),  # NaN
        ([0, 0, math.inf, 10], [0, 0, 10, 10], 0.0),  # inf
        ([-5, -5, 5, 5], [0, 0, 10, 10], 25 / 175),  # negative coordinates are fine
        ([0, 0, 10], [0, 0, 10, 10], 0.0),  # three numbers
        (["a", 0, 10, 10], [0, 0, 10, 10], 0.0),  # not numbers
    ],
)
def test_iou_pixel_convention(box1: list, box2: list, expected: float) -> None:
    assert iou(box1, box2) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<answer>[1, 2, 3, 4]</answer>", (1.0, 2.0, 3.0, 4.0)),
        (
            '<answer>{"bbox_2d": [1.5, 2, 30.25, 40]}</answer>',
            (1.5, 2.0, 30.25, 40.0),
        ),  # decimals accepted
        ("<answer>[1,2,3,4] then [5,6,7,8]</answer>", (1.0, 2.0, 3.0, 4.0)),  # first box
        (
            "[9, 9, 9, 9] <answer>[1, 2, 3, 4]</answer>",
            (1.0, 2.0, 3.0, 4.0),
        ),  # inside the answer span only
        ("<answer>[1, 2, 3]</answer>", None),
        ("<answer>no box</answer>", None),
    ],
)
def test_predicted_box(content: str, expected: tuple | None) -> None:
    assert predicted_box(content) == expected


SCALED = ["<answer>[161, 119, 322, 238]</answer>"]
"""A box in Qwen2.5-VL's resized-input pixels of a 640x480 image: smart_resize gives 644x476."""
GRID = [1, 34, 46]  # 476 / 14, 644 / 14: the processor's grid for that image
TRUTH = ["<answer>[160, 120, 320, 240]</answer>"]  # original-image pixels


def test_scaling_from_the_resized_input_to_original_size(image_640x480: str) -> None:
    # [161, 119, 322, 238] scales by (640/644, 480/476) to [160, 120, 320, 240]
    rewards = iou_reward(
        [[{"role": "assistant", "content": SCALED[0]}]],
        solution=TRUTH,
        image_grid_thw=[GRID],
        image_path=[[image_640x480]],
    )
    assert rewards == [pytest.approx(1.0)]
    unscaled = iou_reward(["<answer>[105, 70, 210, 140]</answer>"], solution=TRUTH)
    assert unscaled[0] < 0.1  # a row without image or grid compares boxes as written


@pytest.mark.parametrize(
    "image_column",
    [
        "image",  # one PIL image per row, as TRL passes it
        "images",  # a list of PIL images per row: the first is the one the box is in
        "image_path",
    ],
)
def test_image_without_grid_computes_the_resize(image_column: str, image_640x480: str) -> None:
    # Before box formats this was a dataset error; now the processor's resize is computed.
    pil = Image.open(image_640x480)
    value = {"image": pil, "images": [pil], "image_path": image_640x480}[image_column]
    assert iou_reward(SCALED, solution=TRUTH, **{image_column: [value]}) == [pytest.approx(1.0)]


def test_a_grid_from_other_resize_settings_is_a_dataset_error(
    image_640x480: str, monkeypatch
) -> None:
    # an engine started with max_pixels 200,704 resizes 640x480 to 504x364: grid 26 x 36
    row = {"image_grid_thw": [[1, 26, 36]], "image_path": [image_640x480]}
    box = ["<answer>[126, 91, 252, 182]</answer>"]  # TRUTH in 504x364 pixels
    assert iou_reward(box, solution=TRUTH, **row) == [None]  # the default bound gives 34 x 46
    assert iou_reward(box, solution=TRUTH, max_pixels=200_704, **row) == [pytest.approx(1.0)]
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(
        ValueError,
        match=r"sample 0: image_grid_thw: the row's grid \[1, 26, 36\] .*max_pixels 12845056\), "
        r"which is \[1, 34, 46\]",
    ):
        iou_reward(box, solution=TRUTH, **row)


@pytest.mark.parametrize("image_column", ["image", "images"])
def test_pil_images_give_the_original_size(image_column: str, image_640x480: str) -> None:
    pil = Image.open(image_640x480)
    value = pil if image_column == "image" else [pil]
    rewards = iou_reward(SCALED, solution=TRUTH, image_grid_thw=[GRID], **{image_column: [value]})
    assert rewards == [pytest.approx(1.0)]


def test_boxes_declared_in_original_pixels_are_not_scaled(image_640x480: str) -> None:
    pil = Image.open(image_640x480)
    assert iou_reward(TRUTH, solution=TRUTH, image=[pil], box_coords="original") == [1.0]
    with_grid = iou_reward(
        TRUTH, solution=TRUTH, image=[pil], image_grid_thw=[[1, 20, 30]], box_format="original"
    )
    assert with_grid == [1.0]  # the grid is ignored: the model answers in original pixels
    from skyrl_rewards.rewards.batch import make_reward

    reward = make_reward("iou", box_coords="original")
    assert reward(TRUTH, solution=TRUTH, image=[pil]) == [1.0]
    with pytest.raises(ValueError, match="box_coords"):
        make_reward("iou", box_coords="resized")


def test_grid_without_any_image_names_the_image(monkeypatch) -> None:
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match="sample 0: image_path: missing; image_grid_thw is given"):
        iou_reward(SCALED, solution=TRUTH, image_grid_thw=[GRID])


def test_patch_size_is_a_parameter(image_640x480: str) -> None:
    rewards = iou_reward(
        ["<answer>[160, 120, 320, 240]</answer>"],
        solution=["<answer>[160, 120, 320, 240]</answer>"],
        image_grid_thw=[[1, 30, 40]],
        image_path=[image_640x480],
        patch_size=16,  # 40 * 16 = 640, 30 * 16 = 480: identity
    )
    assert rewards == [pytest.approx(1.0)]


def test_image_size_reads_only_the_header(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    Image.new("L", (4000, 3000)).save(path)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(path.read_bytes()[:200])  # header intact, pixel data cut
    assert image_size(str(truncated)) == (4000, 3000)


@pytest.mark.parametrize(
    ("bad_grid", "bad_path", "field"),
    [
        ([1, 20], "IMG", "image_grid_thw"),  # two numbers
        ([1, 0, 30], "IMG", "image_grid_thw"),  # zero patches
        ([1, 20, 30], "IMG", "image_grid_thw"),  # not the processor's grid for the image
        (GRID, "/nonexistent.png", "image_path"),  # missing file
        (GRID, None, "image_path"),  # no path
        (GRID, [], "image_path"),  # empty list of paths
    ],
)
def test_bad_rows_raise_with_field_and_index(
    bad_grid: list, bad_path: object, field: str, image_640x480: str, monkeypatch
) -> None:
    kwargs = {
        "solution": ["<answer>[1, 2, 3, 4]</answer>"] * 2,
        "image_grid_thw": [GRID, bad_grid],
        "image_path": [image_640x480, image_640x480 if bad_path == "IMG" else bad_path],
    }
    completions = ["<answer>[1, 2, 3, 4]</answer>"] * 2
    good, masked = iou_reward(completions, **kwargs)  # default: the bad row is masked
    assert masked is None and isinstance(good, float)
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match=rf"sample 1: {field}"):
        iou_reward(completions, **kwargs)


def test_corrupt_image_is_a_dataset_error(tmp_path: Path, monkeypatch) -> None:
    corrupt = tmp_path / "corrupt.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n garbage")
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match="sample 0: image_path: cannot read image"):
        iou_reward(
            ["<answer>[1, 2, 3, 4]</answer>"],
            ["<answer>[1, 2, 3, 4]</answer>"],
            image_grid_thw=[[1, 2, 2]],
            image_path=[str(corrupt)],
        )


def test_bad_ground_truth_box_raises(monkeypatch) -> None:
    assert iou_reward(["<answer>[1, 2, 3, 4]</answer>"], solution=["<answer>[1]</answer>"]) == [
        None
    ]
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match="sample 0: solution"):
        iou_reward(["<answer>[1, 2, 3, 4]</answer>"], solution=["<answer>[1, 2]</answer>"])


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"solution": ["<answer>[10, 10, 0, 0]</answer>"]}, "solution"),  # inverted ground truth
        ({"solution": ["<answer>[0, 0, 0, 10]</answer>"]}, "solution"),  # no area
        ({"solution": None}, "solution"),
        ({"solution": ["<answer>[1, 2, 3, 4]</answer>"], "patch_size": 0}, "patch_size"),
    ],
)
def test_bad_ground_truth_and_parameters_name_the_field(
    kwargs: dict, field: str, monkeypatch
) -> None:
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match=field):
        iou_reward(["<answer>[1, 2, 3, 4]</answer>"], **kwargs)


def test_numpy_grid_and_long_reasoning(image_640x480: str) -> None:
    import numpy as np

    content = "<think>" + "look " * 30_000 + "</think>" + SCALED[0]
    rewards = iou_reward(
        [content],
        solution=TRUTH,
        image_grid_thw=np.array([GRID], dtype=np.int64),
        image_path=[image_640x480],
    )
    assert rewards == [pytest.approx(1.0)]
