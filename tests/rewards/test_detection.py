"""Detection score: greedy matching, labels, completeness, weights."""

from __future__ import annotations

import json
import time

import pytest

from skyrl_rewards import detection_score
from skyrl_rewards.rewards.boxes.detection import Detection, greedy_match


def _block(items: list[dict]) -> str:
    return f"<answer>```json\n{json.dumps(items)}\n```</answer>"


CAT = {"bbox_2d": [0, 0, 10, 10], "label": "cat"}
DOG = {"bbox_2d": [20, 20, 30, 30], "label": "dog"}


@pytest.mark.parametrize(
    ("pred", "gt", "expected"),
    [
        ([CAT, DOG], [CAT, DOG], 1.0),  # perfect
        ([], [], 1.0),  # nothing to find, nothing predicted
        ([CAT], [], 0.0),  # nothing to find, something predicted
        ([], [CAT], 0.0),  # empty prediction
        # one of two found: position 1/2, completeness 1 - (1/2 + 0)/2 = 0.75
        ([CAT], [CAT, DOG], (0.7 * 0.5 + 0.3 * 0.75) / 1.0),
        # wrong label: matched (no miss, no false alarm) but contributes IoU 0
        ([{"bbox_2d": [0, 0, 10, 10], "label": "dog"}], [CAT], (0.7 * 0.0 + 0.3 * 1.0) / 1.0),
        # labels compare case-insensitively
        ([{"bbox_2d": [0, 0, 10, 10], "label": "CAT"}], [CAT], 1.0),
        # below the threshold: unmatched on both sides -> completeness 0
        ([{"bbox_2d": [5, 5, 15, 15], "label": "cat"}], [CAT], 0.0),
        # an extra prediction: false alarm 1/2
        ([CAT, DOG], [CAT], (0.7 * 1.0 + 0.3 * (1 - 0.5 / 2)) / 1.0),
        # malformed predicted box: counts as a prediction, matches nothing
        ([CAT, {"bbox_2d": [1, 2], "label": "dog"}], [CAT], (0.7 + 0.3 * 0.75) / 1.0),
        # non-dict items do not crash
        ([CAT, "junk", 3], [CAT], (0.7 + 0.3 * (1 - (2 / 3) / 2)) / 1.0),
    ],
)
def test_detection_score(pred: list, gt: list, expected: float) -> None:
    assert detection_score(_block(pred), _block(gt)) == pytest.approx(expected)


def test_greedy_takes_highest_iou_first() -> None:
    gt = [Detection((0, 0, 10, 10), "a"), Detection((2, 0, 12, 10), "a")]
    pred = [Detection((1, 0, 11, 10), "a"), Detection((0, 0, 10, 10), "a")]
    matches = greedy_match(pred, gt, 0.5)
    # pred 1 is identical to gt 0 (IoU 1) and is taken first; pred 0 then takes gt 1.
    assert [(p, g) for p, g, _, _ in matches] == [(1, 0), (0, 1)]


def test_weights_and_beta_label_term() -> None:
    wrong_label = _block([{"bbox_2d": [0, 0, 10, 10], "label": "dog"}])
    assert detection_score(wrong_label, _block([CAT]), alpha=0.0, beta=1.0, gamma=0.0) == 0.0
    assert detection_score(_block([CAT]), _block([CAT]), alpha=0.0, beta=1.0, gamma=0.0) == 1.0


@pytest.mark.parametrize("weights", [(0.0, 0.0, 0.0), (-1.0, 0.5, 0.5)])
def test_bad_weights_are_caller_errors(weights: tuple) -> None:
    with pytest.raises(ValueError, match="alpha, beta, gamma"):
        detection_score(_block([CAT]), _block([CAT]), 0.5, *weights)


@pytest.mark.parametrize(
    "content",
    [
        "<answer>no json</answer>",
        "<answer>```json ```</answer>",  # empty block
        '<answer>```json {"bbox_2d": [0, 0, 10, 10]}```</answer>',  # a dict, not a list
        "<answer>```json 12```</answer>",  # a number
    ],
)
def test_unparseable_prediction_is_an_empty_list(content: str) -> None:
    assert detection_score(content, _block([CAT])) == 0.0
    assert detection_score(content, _block([])) == 1.0  # as the reference: empty vs empty


def test_json_repair_output_counts_as_predictions() -> None:
    # json-repair reads "{not json" as ["not json"]: one malformed prediction, a false alarm.
    assert detection_score("<answer>```json {not json```</answer>", _block([])) == 0.0


def test_repaired_prediction_is_used() -> None:
    broken = '<answer>```json [{"bbox_2d": [0, 0, 10, 10], "label": "cat"},]```</answer>'
    assert detection_score(broken, _block([CAT])) == 1.0


@pytest.mark.parametrize(
    "sol", ["<answer>```json {broken```</answer>", _block([{"bbox_2d": [1], "label": "x"}])]
)
def test_bad_ground_truth_is_a_dataset_error(sol: str) -> None:
    with pytest.raises(ValueError, match="solution"):
        detection_score(_block([CAT]), sol)


def test_long_ground_truth_is_read_whole() -> None:
    label = "a tabby cat sitting on the left side of the sofa"
    items = [{"bbox_2d": [i, i, i + 10, i + 10], "label": label} for i in range(250)]
    assert len(json.dumps(items)) > 20_000
    assert detection_score(_block(items), _block(items)) == 1.0


def test_ground_truth_of_1200_boxes_is_not_cut() -> None:
    # issue 11: a valid 54 KB ground truth was refused ("expected a JSON list") because the
    # block search cut it at 50,000 characters; ground truth is trusted and read whole.
    items = [
        {"bbox_2d": [i % 600, i // 2, i % 600 + 20, i // 2 + 20], "label": "car"}
        for i in range(1200)
    ]
    sol = _block(items)
    assert len(sol) > 50_000  # about 54-60 KB
    # 300 exact predictions (MAX_DETECTIONS): position 300/1200, completeness 1 - 0.75/2
    expected = 0.7 * 0.25 + 0.3 * (1 - 0.75 / 2)
    assert detection_score(_block(items[:300]), sol) == pytest.approx(expected)
    assert detection_score(_block([]), sol) == 0.0


def test_long_prediction_is_still_capped() -> None:
    # the model's text stays capped: a block that closes past the search cap is not read
    padded = "<answer>" + "x " * 30_000 + f"```json\n{json.dumps([CAT])}\n```</answer>"
    assert detection_score(padded, _block([CAT])) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"iou_threshold": "0.5"}, "iou_threshold"),  # issue 11: was a TypeError
        ({"iou_threshold": 1.5}, "iou_threshold"),
        ({"iou_threshold": float("nan")}, "iou_threshold"),
        ({"alpha": "0.7"}, "alpha, beta, gamma"),
        ({"gamma": 10**400}, "alpha, beta, gamma"),
    ],
)
def test_bad_arguments_are_value_errors_naming_them(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        detection_score(_block([CAT]), _block([CAT]), **kwargs)


@pytest.mark.parametrize(
    "content",
    [
        "```json\n[" + "1" * 5000 + "]\n```",  # past Python's integer digit limit
        "```json\n[" + 'a"' * 10_000 + "\n```",  # json-repair is quadratic on this
        "```json\n" + '{"' * 10_000 + "```",
    ],
)
def test_hostile_json_neither_raises_nor_stalls(content: str) -> None:
    start = time.perf_counter()
    assert detection_score(content, _block([CAT])) == 0.0
    assert time.perf_counter() - start < 2.0  # seconds per call before the repair cap
