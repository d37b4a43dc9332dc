"""giou: GIoU (NeMo-RL), (GIoU + 1) / 2 (Visual-RFT's LISA, halved) and IoU² (Perception-R1)."""

from __future__ import annotations

import json
import math
import random
import re

import pytest

from skyrl_rewards.rewards.boxes.giou import (
    GIOU_MODES,
    MODE_FLOOR,
    box_iou,
    check_giou_mode,
    generalized_iou,
    giou,
    giou_sample_score,
    giou_score,
    overlap_reward,
)
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.geometry.box_formats import BoxFormatChoice

# --- the anchors, transcribed step by step (never imported, never copied into the package)


def reference_nemo_bbox_giou_reward(
    ground_truth: str, response: str, giou_penalty_thres: float = 10.0, answer_tag: str = "answer"
) -> tuple[float, bool]:
    """NeMo-RL nemo_rl/environments/rewards.py: bbox_giou_reward."""
    match = re.search(rf"<{answer_tag}>([\s\S]*)</{answer_tag}>", response)
    if match:
        answer = match.group(1)
    else:
        return 0.0, False
    try:
        x1g, y1g, x2g, y2g = [
            float(x) for x in ground_truth.replace("[", "").replace("]", "").split(",")
        ]
        x1r, y1r, x2r, y2r = [float(x) for x in answer.replace("[", "").replace("]", "").split(",")]
    except ValueError:
        return 0.0, False
    area_g = (x2g - x1g) * (y2g - y1g)
    area_r = (x2r - x1r) * (y2r - y1r)
    x1i, y1i = max(x1g, x1r), max(y1g, y1r)
    x2i, y2i = min(x2g, x2r), min(y2g, y2r)
    area_i = max(0.0, x2i - x1i) * max(0.0, y2i - y1i)
    area_u = max(1e-3, area_g + area_r - area_i)
    iou = area_i / area_u
    if iou < giou_penalty_thres:
        x1c, y1c = min(x1g, x1r), min(y1g, y1r)
        x2c, y2c = max(x2g, x2r), max(y2g, y2r)
        area_c = max(1e-3, (x2c - x1c) * (y2c - y1c))
        giou_value = iou - (area_c - area_u) / area_c
    else:
        giou_value = iou
    return giou_value, giou_value > 0.5


def reference_visual_rft_lisa_giou(gt_bbox: list, student_bbox: list) -> float:
    """Visual-RFT src/virft/src/open_r1/grpo_lisa.py: compute_giou (corner-pair boxes), GIoU + 1."""
    x1_gt, y1_gt = gt_bbox[0]
    x2_gt, y2_gt = gt_bbox[1]
    x1_st, y1_st = student_bbox[0]
    x2_st, y2_st = student_bbox[1]
    inter_width = max(0, min(x2_gt, x2_st) - max(x1_gt, x1_st))
    inter_height = max(0, min(y2_gt, y2_st) - max(y1_gt, y1_st))
    inter_area = inter_width * inter_height
    gt_area = (x2_gt - x1_gt) * (y2_gt - y1_gt)
    student_area = (x2_st - x1_st) * (y2_st - y1_st)
    union_area = gt_area + student_area - inter_area
    iou = inter_area / union_area if union_area > 0 else 0
    c_area = (max(x2_gt, x2_st) - min(x1_gt, x1_st)) * (max(y2_gt, y2_st) - min(y1_gt, y1_st))
    giou_value = iou - (c_area - union_area) / c_area if c_area > 0 else iou
    return giou_value + 1


_PR1_NUM = r"(-?\d+(?:\.\d+)?)"
_PR1_POINT = r"\(\s*" + _PR1_NUM + r",\s*" + _PR1_NUM + r"\)"


def reference_pr1_grounding_reward(content: str, sol: str) -> float:
    """Perception-R1 src/open_r1/rewards.py: pr1_grounding_reward (utils: extract_bbox_answer,
    parse_float_sequence_within, compute_iou); ``eval(sol)`` read as a JSON list here."""
    content = content.replace("<|endoftext|>", "")
    is_qwen2vl = "<|box_start|>" in content
    bbox = [0.0, 0.0, 0.0, 0.0]
    for pattern in (
        r"\[\s*" + r",\s*".join([_PR1_NUM] * 4) + r"\s*\]",
        r"\(\s*" + r",\s*".join([_PR1_NUM] * 4) + r"\s*\)",
        _PR1_POINT + r",\s*" + _PR1_POINT,
    ):
        match = re.search(pattern, content)
        if match:
            bbox = [float(match.group(i)) for i in range(1, 5)]
            break
    if not is_qwen2vl:
        bbox = [int(x * 1000) for x in bbox]
    gt = json.loads(sol)
    x_left, y_top = max(bbox[0], gt[0]), max(bbox[1], gt[1])
    x_right, y_bottom = min(bbox[2], gt[2]), min(bbox[3], gt[3])
    intersection_area = max(0, x_right - x_left) * max(0, y_bottom - y_top)
    box1_area = (bbox[2] - bbox[0]) * (bbox[3] - bbox[1])
    box2_area = (gt[2] - gt[0]) * (gt[3] - gt[1])
    iou = intersection_area / (box1_area + box2_area - intersection_area)
    return iou**2


# --- generated scenes: valid boxes (positive sides of at least 1 px) in pixel coordinates


def _coord(rng: random.Random, value: float) -> float:
    return float(round(value)) if rng.random() < 0.5 else round(value, 2)


def _random_box(rng: random.Random) -> list[float]:
    x, y = rng.uniform(-50, 1900), rng.uniform(-50, 1900)
    w, h = rng.uniform(1, 400), rng.uniform(1, 400)
    box = [_coord(rng, c) for c in (x, y, x + w, y + h)]
    if box[2] - box[0] < 1 or box[3] - box[1] < 1:
        box[2], box[3] = box[0] + 1, box[1] + 1
    return box


def _near(rng: random.Random, gt: list[float]) -> list[float]:
    kind = rng.random()
    if kind < 0.1:
        return list(gt)  # exact
    if kind < 0.7:  # jittered
        jitter = rng.choice([1, 3, 10, 40, 150])
        box = [c + rng.uniform(-jitter, jitter) for c in gt]
    elif kind < 0.85:  # containing
        grow = rng.uniform(1, 200)
        box = [gt[0] - grow, gt[1] - grow / 2, gt[2] + grow / 3, gt[3] + grow]
    else:  # far away
        dx = rng.choice([-1, 1]) * rng.uniform(500, 1500)
        box = [gt[0] + dx, gt[1], gt[2] + dx, gt[3]]
    box = [_coord(rng, c) for c in box]
    if box[2] - box[0] < 1 or box[3] - box[1] < 1:
        box[2], box[3] = box[0] + 1, box[1] + 1
    return box


def _fmt(box: list[float]) -> str:
    return ", ".join(str(int(c)) if float(c).is_integer() else str(c) for c in box)


def scenes(seed: str, count: int = 400) -> list[tuple[list[float], list[float]]]:
    rng = random.Random(seed)
    return [(gt, _near(rng, gt)) for gt in (_random_box(rng) for _ in range(count))]


def test_giou_matches_nemo_rl_on_generated_scenes() -> None:
    # Equal on every scene: the same formula in the same order. NeMo-RL's max(1e-3, ...)
    # clamps never act on boxes of at least 1 px (areas >= 1), and its giou_penalty_thres
    # default (10.0, above any IoU) always takes the GIoU branch, which is all we compute.
    negatives = 0
    for index, (gt, pred) in enumerate(scenes("nemo")):
        completion = f"<think>the box</think><answer>[{_fmt(pred)}]</answer>"
        solution = f"<answer>[{_fmt(gt)}]</answer>"
        expected, _ = reference_nemo_bbox_giou_reward(f"[{_fmt(gt)}]", completion)
        assert giou(completion, solution) == expected, (index, gt, pred)
        negatives += expected < 0
    assert negatives > 40  # the scenes exercise the enclosing-box penalty


def test_giou_unit_is_visual_rft_lisa_giou_halved() -> None:
    for gt, pred in scenes("lisa"):
        expected = reference_visual_rft_lisa_giou([gt[:2], gt[2:]], [pred[:2], pred[2:]]) / 2
        assert overlap_reward(pred, gt, "giou_unit") == pytest.approx(expected, abs=1e-15)


def test_iou_squared_matches_perception_r1_on_generated_scenes() -> None:
    # Perception-R1's Qwen2-VL completion with box tokens; its box regex wants no space before
    # a comma, which is how the completion is written here.
    for index, (gt, pred) in enumerate(scenes("pr1")):
        completion = (
            "<|object_ref_start|>the dog<|object_ref_end|>"
            f"<|box_start|>[{_fmt(pred)}]<|box_end|><|im_end|>"
        )
        expected = reference_pr1_grounding_reward(completion, json.dumps(gt))
        got = giou(completion, f"<answer>{json.dumps(gt)}</answer>", "iou_squared")
        assert got == pytest.approx(expected, rel=1e-12, abs=1e-15), (index, gt, pred)


# Deliberate differences from the anchors, one case each:
# - no box: NeMo-RL pays 0.0, above any non-overlapping box (GIoU < 0), so a policy would
#   learn to give no answer when unsure; here no box scores the floor, -1.0;
# - a box without area or inverted: the anchors compute on negative areas (NeMo-RL pays a
#   positive GIoU for some, Perception-R1 divides by zero for others); here the floor;
# - NeMo-RL reads the whole answer span as the box ("1, 2, 3, 4" without brackets passes,
#   "box: [1, 2, 3, 4]" fails); here the first bracketed box of the last answer span, as iou;
# - Perception-R1 reads a box without <|box_start|> as 0-1 fractions and truncates x*1000 to
#   an int; here the box format (relative_1, relative_1000, ...) converts it, unrounded.
@pytest.mark.parametrize(
    ("completion", "mode", "anchor", "ours"),
    [
        ("<answer>no idea</answer>", "giou", 0.0, -1.0),
        ("<answer>[10, 10, 5, 5]</answer>", "giou", 0.25, -1.0),  # inverted: NeMo-RL pays
        ("<answer>1, 2, 3, 4</answer>", "giou", None, -1.0),
    ],
)
def test_deliberate_differences_from_nemo_rl(
    completion: str, mode: str, anchor: float | None, ours: float
) -> None:
    gt = "[0, 0, 10, 10]"
    reference, _ = reference_nemo_bbox_giou_reward(gt, completion)
    if anchor is not None:
        assert reference == anchor
    else:
        assert reference != ours
    assert giou(completion, f"<answer>{gt}</answer>", mode) == ours


def test_an_inverted_box_crashes_perception_r1_but_scores_the_floor_here() -> None:
    completion = "<|box_start|>[0, 10, 10, 0]<|box_end|>"  # area -100: its union is 0
    with pytest.raises(ZeroDivisionError):
        reference_pr1_grounding_reward(completion, "[0, 0, 10, 10]")
    assert giou(completion, "<answer>[0, 0, 10, 10]</answer>", "iou_squared") == 0.0


# --- the rules, one case each

GT = "<answer>[0, 0, 10, 10]</answer>"


@pytest.mark.parametrize(
    ("answer", "mode", "expected"),
    [
        ("[0, 0, 10, 10]", "giou", 1.0),  # exact
        ("[0, 0, 10, 10]", "giou_unit", 1.0),
        ("[0, 0, 10, 10]", "iou_squared", 1.0),
        ("[0, 0, 10, 5]", "giou", 0.5),  # half, hull = union
        ("[0, 0, 10, 5]", "iou_squared", 0.25),
        ("[20, 0, 30, 10]", "giou", -1 / 3),  # disjoint: hull 300, union 200
        ("[20, 0, 30, 10]", "giou_unit", 1 / 3),
        ("[20, 0, 30, 10]", "iou_squared", 0.0),
        ("[10, 0, 20, 10]", "giou", 0.0),  # touching: IoU 0, hull = union
        ("[1e300, 0, 1e301, 10]", "giou", -1.0),  # overflowing areas: the floor, no error
        ("[5, 5, 5, 9]", "giou_unit", 0.0),  # no width: the floor
    ],
)
def test_overlap_shapes(answer: str, mode: str, expected: float) -> None:
    assert giou(f"<think>t</think><answer>{answer}</answer>", GT, mode) == pytest.approx(expected)


@pytest.mark.parametrize("mode", GIOU_MODES)
def test_no_box_is_unparseable_at_the_floor(mode: str) -> None:
    score = giou_score("<answer>the cat on the left</answer>", (0.0, 0.0, 10.0, 10.0), mode)
    assert (score.value, score.status) == (MODE_FLOOR[mode], Status.UNPARSEABLE)


def test_giou_is_never_above_iou_and_ranges_hold() -> None:
    for gt, pred in scenes("ranges", 300):
        value = generalized_iou(pred, gt)
        assert value is not None and -1.0 <= value <= box_iou(pred, gt) + 1e-12 <= 1.0 + 1e-12


def test_model_text_never_raises() -> None:
    for content in (None, 7, "", "<answer>" * 1000, "[1, 2, 3, 4" * 10_000, "[nan, 1, 2, 3]"):
        assert giou_score(content, (0.0, 0.0, 10.0, 10.0)).value == -1.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "solution",
    ["<answer>the cat</answer>", "<answer>[10, 10, 0, 0]</answer>", "<answer>[1, 2, 3]</answer>"],
)
def test_a_bad_ground_truth_names_solution(solution: str) -> None:
    with pytest.raises(ValueError, match="^solution"):
        giou("<answer>[0, 0, 1, 1]</answer>", solution)


def test_an_unknown_mode_names_mode() -> None:
    with pytest.raises(ValueError, match="^mode"):
        check_giou_mode("giou2")


def test_boxes_are_converted_by_the_box_format(image_640x480: str) -> None:
    # Qwen3-VL answers on the 0-1000 grid: [0, 0, 500, 1000] is the left half of 640x480
    columns = {"image_path": image_640x480}
    qwen3 = BoxFormatChoice.build("qwen3_vl")
    score = giou_sample_score(
        "<answer>[0, 0, 500, 1000]</answer>", "<answer>[0, 0, 320, 480]</answer>", columns, qwen3
    )
    assert score.value == 1.0
    # the default, Qwen2.5-VL's resized pixels: 640x480 is resized to 644x476
    default = BoxFormatChoice.build(default="qwen2_5_vl")
    score = giou_sample_score(
        "<answer>[0, 0, 644, 476]</answer>", "<answer>[0, 0, 640, 480]</answer>", columns, default
    )
    assert score.value == pytest.approx(1.0)
    # a relative format without the image is a dataset error naming the column
    with pytest.raises(ValueError, match="^image_path"):
        giou_sample_score("<answer>[0, 0, 1, 1]</answer>", GT, {}, qwen3)


def test_giou_rewards_moving_closer_even_without_overlap() -> None:
    # why GIoU: IoU is flat at 0 for any disjoint box, GIoU still ranks them
    far, near = "<answer>[100, 0, 110, 10]</answer>", "<answer>[12, 0, 22, 10]</answer>"
    assert giou(far, GT, "iou_squared") == giou(near, GT, "iou_squared") == 0.0
    assert giou(far, GT) < giou(near, GT) < 0.0
    assert math.isclose(giou(near, GT, "giou_unit"), (giou(near, GT) + 1) / 2)
