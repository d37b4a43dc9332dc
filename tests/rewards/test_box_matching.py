"""boxes_matched: Hungarian matching of many boxes, against brute force and Visual-RFT's procedure."""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import time
from typing import Any

import pytest

from skyrl_rewards.rewards.boxes.box_matching import (
    MAX_GROUND_TRUTH_BOXES,
    MAX_MATCHED_PREDICTIONS,
    boxes_matched,
    boxes_matched_sample_score,
    boxes_matched_score,
    check_confidence_weight,
    check_iou_threshold,
    linear_assignment,
)
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.geometry.box_formats import BoxFormatChoice

# --- the assignment against brute force


def brute_force_best(weights: list[list[float]]) -> float:
    n, m = len(weights), len(weights[0])
    if n <= m:
        return max(
            sum(weights[i][j] for i, j in enumerate(cols))
            for cols in itertools.permutations(range(m), n)
        )
    return max(
        sum(weights[i][j] for j, i in enumerate(rows))
        for rows in itertools.permutations(range(n), m)
    )


@pytest.mark.parametrize("kind", ["uniform", "sparse", "ties", "negative"])
def test_assignment_is_optimal_on_random_matrices(kind: str) -> None:
    rng = random.Random(kind)
    for _ in range(300):
        n, m = rng.randint(1, 6), rng.randint(1, 6)
        if kind == "uniform":
            weights = [[rng.random() for _ in range(m)] for _ in range(n)]
        elif kind == "sparse":  # mostly zeros, as IoU matrices are
            weights = [
                [rng.random() if rng.random() < 0.3 else 0.0 for _ in range(m)] for _ in range(n)
            ]
        elif kind == "ties":
            weights = [[float(rng.randint(0, 2)) for _ in range(m)] for _ in range(n)]
        else:
            weights = [[rng.uniform(-5, 5) for _ in range(m)] for _ in range(n)]
        pairs = linear_assignment(weights)
        assert len(pairs) == min(n, m)
        assert len({i for i, _ in pairs}) == len({j for _, j in pairs}) == len(pairs)
        total = sum(weights[i][j] for i, j in pairs)
        assert total == pytest.approx(brute_force_best(weights), abs=1e-9), weights


def test_assignment_edge_cases() -> None:
    assert linear_assignment([]) == []
    assert linear_assignment([[]]) == []
    assert linear_assignment([[3.0]]) == [(0, 0)]
    assert linear_assignment([[1.0], [5.0], [2.0]]) == [(1, 0)]  # more rows than columns
    with pytest.raises(ValueError, match="rectangular"):
        linear_assignment([[1.0, 2.0], [1.0]])
    with pytest.raises(ValueError, match="finite"):
        linear_assignment([[math.nan]])


def test_greedy_is_not_optimal_but_hungarian_is() -> None:
    # greedy takes the 0.9 pair first and is left with 0.1; the best matching pays 0.8 + 0.8
    weights = [[0.9, 0.8], [0.8, 0.1]]
    assert linear_assignment(weights) == [(0, 1), (1, 0)]


# --- Visual-RFT's procedure (src/virft/src/open_r1/grpo.py: extract_bbox, calculate_iou,
# sort_and_calculate_iou, remove_duplicates, compute_reward_iou_v2, compute_reward_confidence,
# and the bodies of accuracy_reward_iou / accuracy_reward_confidence), step by step. Left out:
# their first step, math-verify of the whole completion against the solution (a symbolic
# check of box lists that here could only pay 1.0 for a copy of the solution's text).


def ref_extract_bbox(response: str) -> Any:
    start_tag, end_tag = "<answer>", "</answer>"
    if start_tag not in response:
        return None
    start_idx = response.find(start_tag) + len(start_tag)
    end_idx = response.find(end_tag)
    if end_idx == -1:
        end_idx = len(response)
    content_str = response[start_idx:end_idx]
    if not content_str.endswith("]"):
        content_str = content_str.rsplit("},", 1)[0] + "}]"
    try:
        return json.loads(content_str.replace("'", '"'))
    except json.JSONDecodeError:
        return None


def ref_calculate_iou(bbox1: list, bbox2: list) -> float:
    x1, y1, x2, y2 = bbox1
    x1_2, y1_2, x2_2, y2_2 = bbox2
    xi1, yi1, xi2, yi2 = max(x1, x1_2), max(y1, y1_2), min(x2, x2_2), min(y2, y2_2)
    if xi2 <= xi1 or yi2 <= yi1:
        return 0.0
    intersection_area = (xi2 - xi1) * (yi2 - yi1)
    union_area = (x2 - x1) * (y2 - y1) + (x2_2 - x1_2) * (y2_2 - y1_2) - intersection_area
    return intersection_area / union_area


def ref_sort_and_calculate_iou(list1: list, list2: list, iou_threshold: float = 0.5) -> list:
    list2_sorted = sorted(list2, key=lambda x: x["Confidence"], reverse=True)
    iou_results = []
    matched_list1_indices: set[int] = set()
    for bbox2 in list2_sorted:
        matched_bbox1, best_iou = -1, 0
        for i, bbox1 in enumerate(list1):
            if i not in matched_list1_indices:
                iou = ref_calculate_iou(bbox1["Position"], bbox2["Position"])
                if iou > best_iou:
                    best_iou, matched_bbox1 = iou, i
        if best_iou > iou_threshold:
            iou_results.append((best_iou, bbox2["Confidence"]))
            matched_list1_indices.add(matched_bbox1)
        else:
            iou_results.append((0, bbox2["Confidence"]))
    return iou_results


def ref_remove_duplicates(bbox_list: list) -> list:
    seen: set[tuple] = set()
    unique = []
    for bbox in bbox_list:
        key = tuple(bbox["Position"])
        if key not in seen:
            seen.add(key)
            unique.append(bbox)
    return unique


def ref_terms(iou_results: list) -> tuple[float, float]:
    iou_reward = confidence_reward = 0.0
    for temp_iou, temp_confidence in iou_results:
        iou_reward += temp_iou
        if temp_iou == 0:
            confidence_reward += (1 - temp_iou) * (1 - temp_confidence)
        else:
            confidence_reward += temp_confidence
    return iou_reward, confidence_reward


def reference_visual_rft(content: str, sol: str, which: str) -> float:
    """accuracy_reward_iou (which="iou", with compute_reward_iou_v2) or accuracy_reward_confidence."""
    try:
        content_match = re.search(r"<answer>(.*?)</answer>", content)
        student_answer = content_match.group(1).strip() if content_match else content.strip()
        student_answer = "<answer>" + student_answer + "</answer>"
        student_answer = student_answer.replace("[[", "[").replace("]]", "]").replace("\n", "")
        ground_truth_bbox = ref_extract_bbox(sol.strip())
        student_answer_bbox = ref_extract_bbox(student_answer)
        if student_answer_bbox is None or not isinstance(student_answer_bbox[0], dict):
            return 0.0
        student_answer_bbox = ref_remove_duplicates(student_answer_bbox)
        iou_results = ref_sort_and_calculate_iou(ground_truth_bbox, student_answer_bbox)
        iou_sum, confidence_sum = ref_terms(iou_results)
        if which == "iou":
            len_gt = len(ground_truth_bbox)
            reward = iou_sum / (len_gt if len_gt >= len(iou_results) else len(iou_results))
            return min(reward, 1.0)
        return min(max(confidence_sum / len(iou_results), 0.0), 1.0)
    except Exception:  # noqa: BLE001 - the reference's own catch-all, transcribed
        return 0.0


# --- generated scenes. Each box lives in its own cell of a 5x5 grid of 200-px cells, gold and
# predicted boxes alike: gold boxes are disjoint, predictions are disjoint, no prediction
# repeats another. There, each prediction has IoU > 0.5 with at most one gold box and the
# other way round, so Visual-RFT's greedy (by confidence) and the optimal matching count the
# same pairs, and the two procedures must agree to the last bit of float rounding (sums run
# in another order: confidence order there, list order here).

CELL = 200


def _in_cell(rng: random.Random, cell: int) -> list[float]:
    cx, cy = (cell % 5) * CELL, (cell // 5) * CELL
    x1, y1 = cx + rng.uniform(0, 150), cy + rng.uniform(0, 150)
    x2, y2 = x1 + rng.uniform(5, cx + CELL - x1), y1 + rng.uniform(5, cy + CELL - y1)
    return [round(v) if rng.random() < 0.5 else round(v, 1) for v in (x1, y1, x2, y2)]


def _jitter_in_cell(rng: random.Random, box: list[float], cell: int) -> list[float]:
    """``box`` moved by a random jitter, kept inside its cell and at least 1 px wide and high."""
    cx, cy = (cell % 5) * CELL, (cell // 5) * CELL
    for _ in range(20):
        j = rng.choice([0, 2, 8, 25, 60])
        x1, y1, x2, y2 = (round(c + rng.uniform(-j, j), 1) for c in box)
        out = [
            max(cx, min(cx + CELL, x1)),
            max(cy, min(cy + CELL, y1)),
            max(cx, min(cx + CELL, x2)),
            max(cy, min(cy + CELL, y2)),
        ]
        if out[2] - out[0] >= 1 and out[3] - out[1] >= 1:
            return out
    return list(box)


def grid_scene(rng: random.Random) -> tuple[list[list[float]], list[tuple[list[float], float]]]:
    gold_cells = rng.sample(range(25), rng.randint(1, 8))
    gold = [_in_cell(rng, c) for c in gold_cells]
    preds = []
    free = [c for c in range(25) if c not in gold_cells]
    for box, cell in zip(gold, gold_cells, strict=True):
        if rng.random() < 0.75:
            preds.append((_jitter_in_cell(rng, box, cell), round(rng.uniform(0.05, 1.0), 2)))
    for cell in rng.sample(free, rng.randint(0, 3)):  # false alarms
        preds.append((_in_cell(rng, cell), round(rng.uniform(0.05, 1.0), 2)))
    rng.shuffle(preds)
    return gold, preds


def visual_rft_texts(gold: list, preds: list) -> tuple[str, str]:
    answer = str([{"Position": box, "Confidence": conf} for box, conf in preds])
    gt = str([{"Position": box, "Confidence": 1} for box in gold])
    return f"<think>I see them.</think><answer>{answer}</answer>", f"<answer>{gt}</answer>"


def our_texts(gold: list, preds: list, rng: random.Random) -> tuple[str, str]:
    items = [{"bbox_2d": box, "label": "thing", "confidence": conf} for box, conf in preds]
    body = json.dumps(items)
    answer = rng.choice([body, f"```json\n{body}\n```"])
    gt = json.dumps([{"bbox_2d": box, "label": "thing"} for box in gold])
    return f"<think>I see them.</think><answer>{answer}</answer>", f"<answer>{gt}</answer>"


def test_random_scenes_score_as_visual_rft() -> None:
    rng = random.Random("visual-rft")
    partial = 0
    for index in range(400):
        gold, preds = grid_scene(rng)
        ref_content, ref_sol = visual_rft_texts(gold, preds)
        content, sol = our_texts(gold, preds, rng)
        expected_iou = reference_visual_rft(ref_content, ref_sol, "iou")
        expected_confidence = reference_visual_rft(ref_content, ref_sol, "confidence")
        got_iou = boxes_matched(content, sol, match_labels=False, iou_threshold=0.5)
        got_both = boxes_matched(
            content, sol, match_labels=False, iou_threshold=0.5, confidence_weight=1.0
        )
        if not preds:  # Visual-RFT: an empty list fails its [0] test and pays 0.0 (so do we)
            assert expected_iou == expected_confidence == got_iou == got_both == 0.0
            continue
        assert math.isclose(got_iou, expected_iou, rel_tol=1e-12, abs_tol=1e-15), index
        both = (expected_iou + expected_confidence) / 2
        assert math.isclose(got_both, both, rel_tol=1e-12, abs_tol=1e-15), index
        partial += 0.0 < got_iou < 1.0
    assert partial > 200  # misses, false alarms and loose boxes, not only the extremes


def test_on_overlapping_scenes_the_matching_never_pays_less_than_visual_rft_greedy() -> None:
    # Where boxes overlap, greedy by confidence can pair badly; the optimal matching counts at
    # least as much IoU (deliberate: Perception-R1's bipartite matching).
    rng = random.Random("overlap")
    better = 0
    for _ in range(300):
        gold = [[rng.randint(0, 300), rng.randint(0, 300)] for _ in range(rng.randint(1, 5))]
        gold = [[x, y, x + rng.randint(40, 120), y + rng.randint(40, 120)] for x, y in gold]
        preds = []
        for _ in range(rng.randint(1, 5)):
            base = rng.choice(gold)
            box = [c + rng.randint(-25, 25) for c in base]
            if box[2] > box[0] and box[3] > box[1] and all(box != p for p, _ in preds):
                preds.append((box, round(rng.random(), 2)))
        if not preds:
            continue
        ref_content, ref_sol = visual_rft_texts(gold, preds)
        content, sol = our_texts(gold, preds, rng)
        expected = reference_visual_rft(ref_content, ref_sol, "iou")
        got = boxes_matched(content, sol, match_labels=False, iou_threshold=0.5)
        assert got >= expected - 1e-12
        better += got > expected + 1e-9
    assert better > 5


# --- the definition (Perception-R1's bipartite matching, normalised by the larger count),
# by brute force over every one-to-one pairing, on small scenes with labels


def plain_iou(a: list, b: list) -> float:
    inter = max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


def reference_definition(gold: list, preds: list, threshold: float) -> float:
    def weight(p: dict, g: dict) -> float:
        if p["label"].lower() != g["label"].lower():
            return 0.0
        overlap = plain_iou(p["bbox_2d"], g["bbox_2d"])
        return overlap if overlap > threshold else 0.0

    weights = [[weight(p, g) for g in gold] for p in preds]
    return brute_force_best(weights) / max(len(preds), len(gold))


@pytest.mark.parametrize("threshold", [0.0, 0.5])
def test_random_labelled_scenes_match_the_definition(threshold: float) -> None:
    rng = random.Random(f"definition-{threshold}")
    labels = ["cat", "dog", "car"]
    for index in range(300):
        gold = []
        for _ in range(rng.randint(1, 5)):
            x, y = rng.randint(0, 400), rng.randint(0, 400)
            box = [x, y, x + rng.randint(10, 150), y + rng.randint(10, 150)]
            gold.append({"bbox_2d": box, "label": rng.choice(labels)})
        preds = []
        for _ in range(rng.randint(1, 5)):
            base = rng.choice(gold)
            label = base["label"] if rng.random() < 0.8 else rng.choice(labels)
            box = [c + rng.randint(-30, 30) for c in base["bbox_2d"]]
            if box[2] > box[0] and box[3] > box[1]:
                preds.append({"bbox_2d": box, "label": rng.choice([label, label.upper()])})
        if not preds:
            continue
        expected = reference_definition(gold, preds, threshold)
        content = f"<answer>```json\n{json.dumps(preds)}\n```</answer>"
        got = boxes_matched(
            content, f"<answer>{json.dumps(gold)}</answer>", iou_threshold=threshold
        )
        assert got == pytest.approx(expected, abs=1e-12), index


# --- the rules, one case each

CAT = {"bbox_2d": [0, 0, 100, 100], "label": "cat"}
DOG = {"bbox_2d": [200, 0, 300, 100], "label": "dog"}
GT = f"<answer>{json.dumps([CAT, DOG])}</answer>"


def _answer(items: Any) -> str:
    return f"<think>looking</think><answer>```json\n{json.dumps(items)}\n```</answer>"


@pytest.mark.parametrize(
    ("items", "params", "expected"),
    [
        ([CAT, DOG], {}, 1.0),  # both found
        ([DOG, CAT], {}, 1.0),  # order does not matter
        ([CAT], {}, 0.5),  # one missed: divided by max(1, 2)
        ([CAT, DOG, {"bbox_2d": [500, 500, 600, 600], "label": "cat"}], {}, 2 / 3),  # false alarm
        ([CAT, DOG, CAT], {}, 2 / 3),  # a repeated box counts as an extra prediction
        ([{**CAT, "label": "Cat "}, DOG], {}, 1.0),  # labels: case and spaces ignored
        ([{**CAT, "label": "dog"}, {**DOG, "label": "cat"}], {}, 0.0),  # swapped labels
        ([{**CAT, "label": "dog"}, {**DOG, "label": "cat"}], {"match_labels": False}, 1.0),
        ([{"bbox_2d": [0, 0, 100, 50], "label": "cat"}, DOG], {}, 0.75),  # half a cat
        ([{"bbox_2d": [0, 0, 100, 50], "label": "cat"}, DOG], {"iou_threshold": 0.5}, 0.5),
        ([{"bbox_2d": [0, 0, 100], "label": "cat"}, DOG], {}, 0.5),  # a malformed box
        (["cat", DOG], {}, 0.5),  # an item that is not an object
    ],
)
def test_matching_rules(items: list, params: dict, expected: float) -> None:
    assert boxes_matched(_answer(items), GT, **params) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("confidences", "expected"),
    [
        ((1.0, 0.0), (0.5 + (1.0 + 1.0) / 2) / 2),  # sure of the hit, unsure of the miss
        ((0.0, 1.0), (0.5 + 0.0) / 2),  # the other way round
        ((None, None), (0.5 + 0.0) / 2),  # no confidence: 0 in that term
        ((1.5, "high"), (0.5 + 0.0) / 2),  # outside [0, 1] or not a number: as none
    ],
)
def test_confidence_term(confidences: tuple, expected: float) -> None:
    hit = {**CAT}
    miss = {"bbox_2d": [500, 500, 600, 600], "label": "dog"}
    items = []
    for item, conf in zip((hit, miss), confidences, strict=True):
        items.append(item if conf is None else {**item, "confidence": conf})
    got = boxes_matched(
        _answer(items), f"<answer>{json.dumps([CAT])}</answer>", confidence_weight=1
    )
    # iou term: 1 / max(2, 1) = 0.5
    assert got == pytest.approx(expected)


def test_score_is_read_as_confidence() -> None:
    items = [{**CAT, "score": 0.5}]
    got = boxes_matched(
        _answer(items), f"<answer>{json.dumps([CAT])}</answer>", confidence_weight=3
    )
    assert got == pytest.approx((1.0 + 3 * 0.5) / 4)


@pytest.mark.parametrize(
    ("content", "gold", "value", "status"),
    [
        ("<answer>[]</answer>", [], 1.0, Status.OK),  # no target, none predicted
        (_answer([CAT]), [], 0.0, Status.OK),  # no target, one predicted
        ("<answer>[]</answer>", [CAT], 0.0, Status.OK),  # targets, none predicted
        ("<answer>there is nothing</answer>", [], 0.0, Status.UNPARSEABLE),  # no list at all
        ("<answer>there is a cat</answer>", [CAT], 0.0, Status.UNPARSEABLE),
        ('<answer>{"bbox_2d": [0, 0, 100, 100]}</answer>', [CAT], 0.0, Status.UNPARSEABLE),
        ('<answer>[{"bbox_2d": [0, 0, 100, 100], "label": "cat",]</answer>', [CAT], 1.0, Status.OK),
    ],
)
def test_empty_lists_and_unreadable_answers(
    content: str, gold: list, value: float, status: Status
) -> None:
    score = boxes_matched_score(content, f"<answer>{json.dumps(gold)}</answer>")
    assert (score.value, score.status) == (value, status)


def test_model_text_never_raises() -> None:
    for content in (None, 3, "", "[" * 100_000, "<answer>[" + "{}," * 50_000 + "]</answer>"):
        assert boxes_matched_score(content, GT).value == 0.0  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "solution",
    [
        "<answer>two cats</answer>",
        '<answer>[{"bbox_2d": [10, 10, 0, 0], "label": "cat"}]</answer>',  # no area
        '<answer>[{"bbox_2d": [0, 0, 1], "label": "cat"}]</answer>',
        "<answer>" + json.dumps([CAT] * (MAX_GROUND_TRUTH_BOXES + 1)) + "</answer>",
    ],
)
def test_a_bad_ground_truth_names_solution(solution: str) -> None:
    with pytest.raises(ValueError, match="^solution"):
        boxes_matched(_answer([CAT]), solution)


def test_bad_parameters_name_themselves() -> None:
    with pytest.raises(ValueError, match="^iou_threshold"):
        check_iou_threshold(1.0)
    with pytest.raises(ValueError, match="^confidence_weight"):
        check_confidence_weight(-1)
    with pytest.raises(ValueError, match="^iou_threshold"):
        boxes_matched(_answer([CAT]), GT, iou_threshold=math.nan)


def test_predictions_past_the_cap_are_not_matched_but_counted() -> None:
    far = {"bbox_2d": [900, 900, 950, 950], "label": "cat"}
    items = [far] * MAX_MATCHED_PREDICTIONS + [CAT]
    assert boxes_matched(_answer(items), f"<answer>{json.dumps([CAT])}</answer>") == 0.0
    assert boxes_matched(_answer([CAT, *items]), f"<answer>{json.dumps([CAT])}</answer>") == (
        pytest.approx(1 / (MAX_MATCHED_PREDICTIONS + 2))
    )


def test_a_full_100_by_100_scene_is_fast() -> None:
    # every box overlaps every other: a dense 100 x 100 IoU matrix
    gold = [{"bbox_2d": [i, i, 500 + i, 500 + i], "label": "a"} for i in range(100)]
    preds = [{"bbox_2d": [i + 1, i, 501 + i, 500 + i], "label": "a"} for i in range(100)]
    start = time.process_time()
    got = boxes_matched(_answer(preds), f"<answer>{json.dumps(gold)}</answer>")
    assert time.process_time() - start < 2.0
    assert got == pytest.approx(499 / 501)


def test_boxes_are_converted_by_the_box_format(image_640x480: str) -> None:
    columns = {"image_path": image_640x480}
    gold = f"<answer>{json.dumps([{'bbox_2d': [0, 0, 320, 480], 'label': 'cat'}])}</answer>"
    qwen3 = _answer([{"bbox_2d": [0, 0, 500, 1000], "label": "cat"}])  # 0-1000 grid
    score = boxes_matched_sample_score(qwen3, gold, columns, BoxFormatChoice.build("qwen3_vl"))
    assert score.value == 1.0
    # the default for this reward is original pixels, as written
    original = BoxFormatChoice.build(default="original")
    assert boxes_matched_sample_score(qwen3, gold, columns, original).value < 1.0
    # a row's own box_format column wins over the reward's
    row = {**columns, "box_format": "qwen3_vl"}
    assert boxes_matched_sample_score(qwen3, gold, row, original).value == 1.0
    # a format that needs the image, on a row without one: a dataset error naming the column
    with pytest.raises(ValueError, match="^image_path"):
        boxes_matched_sample_score(qwen3, gold, {}, BoxFormatChoice.build("qwen2_5_vl"))
