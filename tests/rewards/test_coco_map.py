"""COCO mAP methods (map, od_ap, od_ap50, odLength): exact against VLM-R1's procedure, hardened."""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import re
from typing import Any

import pytest
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from skyrl_rewards.rewards.accuracy import accuracy_score
from skyrl_rewards.rewards.boxes.coco_map import (
    MAP_METHODS,
    MAX_DETECTIONS_PER_LABEL,
    coco_map,
    coco_map_score,
)
from skyrl_rewards.rewards.contract.json_extract import MAX_JSON_CHARS
from skyrl_rewards.rewards.contract.result import Status

# --- the reference: VLM-R1's procedure (src/open-r1-multimodal/src/open_r1/grpo_jsonl.py:
# calculate_map, map_reward, od_reward, odLength_reward), step by step, on pycocotools. Its
# vendored COCO takes the annotation dict directly; pycocotools takes a file, so the dict is
# set as the dataset and indexed. Its prints are silenced as the vendored copy's were.

_BLOCK = r"```json(.*?)```"
_ANSWER = r"<answer>(.*?)</answer>"


def reference_calculate_map(pred_bbox_list: list, gt_bbox_list: list, score_type: int) -> float:
    gt_json: dict[str, Any] = {"annotations": [], "images": [], "categories": []}
    gt_json["images"] = [{"id": 0, "width": 2048, "height": 2048, "file_name": "image_0.jpg"}]
    cats2id: dict[Any, int] = {}
    cat_count = 0
    for idx, gt_bbox in enumerate(gt_bbox_list):
        if gt_bbox["label"] not in cats2id:
            cats2id[gt_bbox["label"]] = cat_count
            gt_json["categories"].append({"id": cat_count, "name": gt_bbox["label"]})
            cat_count += 1
        b = gt_bbox["bbox_2d"]
        gt_json["annotations"].append(
            {
                "id": idx + 1,
                "image_id": 0,
                "category_id": cats2id[gt_bbox["label"]],
                "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                "area": (b[2] - b[0]) * (b[3] - b[1]),
                "iscrowd": 0,
            }
        )
    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt_json
        coco_gt.createIndex()
    dt_json = []
    for pred_bbox in pred_bbox_list:
        try:
            b = pred_bbox["bbox_2d"]
            dt_json.append(
                {
                    "image_id": 0,
                    "category_id": cats2id[pred_bbox["label"]],
                    "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
                    "score": 1.0,
                    "area": (b[2] - b[0]) * (b[3] - b[1]),
                }
            )
        except Exception:  # the reference's bare except
            pass
    if len(dt_json) == 0:
        return 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        coco_dt = coco_gt.loadRes(dt_json)
        coco_eval = COCOeval(coco_gt, coco_dt, "bbox")
        coco_eval.evaluate()
        coco_eval.accumulate()
        coco_eval.summarize()
    return coco_eval.stats[score_type]


def reference_map_reward(
    content: str, sol: str, length_reward: bool = False, score_type: int = 0
) -> float:
    json_match = re.findall(_BLOCK, sol, re.DOTALL)
    bbox_json = json_match[-1].strip() if json_match else None
    gt_bbox_list = []
    if bbox_json:
        gt_bbox_list = list(json.loads(bbox_json))
    pred_bbox_list = []
    json_match = re.findall(_BLOCK, content, re.DOTALL)
    if json_match:
        try:
            pred_bbox_list = list(json.loads(json_match[-1].strip()))
        except Exception:  # the reference's bare except
            pred_bbox_list = []
    if len(pred_bbox_list) > 0 and len(gt_bbox_list) > 0:
        bbox_reward = reference_calculate_map(pred_bbox_list, gt_bbox_list, score_type)
    elif len(pred_bbox_list) == 0 and len(gt_bbox_list) == 0:
        bbox_reward = 1.0
    else:
        bbox_reward = 0.0
    if length_reward:
        gt_length, pred_length = len(gt_bbox_list), len(pred_bbox_list)
        length_score = 1.0 if gt_length >= pred_length else gt_length / pred_length
        return bbox_reward * length_score
    return bbox_reward


def reference_od_reward(content: str, sol: str, method: str) -> float:
    sol_match = re.search(_ANSWER, sol, re.DOTALL)
    ground_truth = sol_match.group(1).strip() if sol_match else None
    content_match = re.findall(_ANSWER, content, re.DOTALL)
    student_answer = content_match[-1].strip() if content_match else None
    if student_answer is None:
        return 0.0
    if ground_truth == "None" and student_answer == "None":
        return 1.0
    if method == "odLength":
        return reference_map_reward(student_answer, ground_truth, length_reward=True)
    return reference_map_reward(student_answer, ground_truth, score_type=int(method == "od_ap50"))


def reference(content: str, sol: str, method: str) -> float:
    if method == "map":
        return reference_map_reward(content, sol)
    return reference_od_reward(content, sol, method)


# --- random scenes: what both read the same way (see docs/rewards.md for where they differ)

LABELS = ["cat", "dog", "car", "person", "tree"]


def _box(rng: random.Random, near: list | None = None) -> list:
    kind = rng.random()
    if near is not None and kind < 0.5:  # overlapping a ground-truth box, jittered
        jitter = rng.choice([0, 0, 1, 3, 8, 20])
        return [c + rng.randint(-jitter, jitter) for c in near]
    if kind < 0.06:  # degenerate: inverted or empty
        x, y = rng.randint(0, 2000), rng.randint(0, 2000)
        return rng.choice([[x, y, x - 10, y + 10], [x, y, x, y + 10], [x, y, x, y]])
    if kind < 0.12:  # out of the 2048x2048 image
        return [rng.randint(-500, 3000) for _ in range(2)] + [rng.randint(2100, 5000)] * 2
    x, y = rng.uniform(0, 1900), rng.uniform(0, 1900)
    w, h = rng.uniform(1, 300), rng.uniform(1, 300)
    coords = [x, y, x + w, y + h]
    return [round(c) for c in coords] if rng.random() < 0.5 else [round(c, 2) for c in coords]


def _malformed(rng: random.Random) -> Any:
    """Predictions both sides drop (the reference by its bare except)."""
    return rng.choice(
        [
            "junk",
            7,
            None,
            [1, 2, 3, 4],
            {"label": "cat"},
            {"bbox_2d": [1, 2, 3, 4]},
            {"bbox_2d": [1, 2, 3], "label": "cat"},
            {"bbox_2d": ["a", "b", "c", "d"], "label": "cat"},
            {"bbox_2d": [1, 2, 30, 40], "label": ["cat"]},
            {"bbox_2d": [1, 2, 30, 40], "label": "zebra"},  # not a ground-truth label
            {"bbox_2d": [1, 2, 30, 40], "label": "Cat"},  # labels are case-sensitive
        ]
    )


def scene(rng: random.Random) -> tuple[list, list]:
    labels = rng.sample(LABELS, rng.randint(1, len(LABELS)))
    gt = [{"bbox_2d": _box(rng), "label": rng.choice(labels)} for _ in range(rng.randint(0, 50))]
    gt = [
        g for g in gt if g["bbox_2d"][0] <= g["bbox_2d"][2] and g["bbox_2d"][1] <= g["bbox_2d"][3]
    ]
    pred: list = []
    for _ in range(rng.randint(0, 50)):
        kind = rng.random()
        if kind < 0.1:
            pred.append(_malformed(rng))
        elif kind < 0.2 and pred:  # a duplicate
            pred.append(dict(rng.choice([p for p in pred if isinstance(p, dict)] or [{}])))
        else:
            near = rng.choice(gt) if gt and rng.random() < 0.7 else None
            label = near["label"] if near and rng.random() < 0.85 else rng.choice(LABELS)
            pred.append({"bbox_2d": _box(rng, near["bbox_2d"] if near else None), "label": label})
    return pred, gt


def _fence(items: list) -> str:
    return f"```json\n{json.dumps(items)}\n```"


def texts(rng: random.Random, pred: list, gt: list) -> tuple[str, str]:
    """A completion and a solution in the shapes a dataset and a model produce."""
    answer = _fence(pred) if pred or rng.random() < 0.5 else rng.choice(["None", "no objects"])
    completion = rng.choice(
        [
            f"<think>looking</think><answer>{answer}</answer>",
            f"<think>draft {_fence(pred[:1])}</think><answer>{answer}</answer>",
            f"<answer>{answer}</answer>",
            answer,  # no answer span: od methods score 0.0, map reads the text
        ]
    )
    solution = f"<answer>{_fence(gt) if gt or rng.random() < 0.5 else 'None'}</answer>"
    return completion, solution


@pytest.mark.parametrize("method", MAP_METHODS)
def test_random_scenes_score_exactly_as_the_reference(method: str) -> None:
    rng = random.Random(f"coco-map-{method}")
    nonzero = 0
    for index in range(300):
        pred, gt = scene(rng)
        completion, solution = texts(rng, pred, gt)
        expected = reference(completion, solution, method)
        got = coco_map(completion, solution, method)
        assert got == expected, (index, completion, solution)
        nonzero += 0.0 < got < 1.0
    assert nonzero > 50  # the scenes exercise partial AP, not only the empty-list rules


def test_more_than_100_predictions_of_a_label_score_as_the_reference() -> None:
    rng = random.Random(7)
    gt = [{"bbox_2d": _box(rng), "label": rng.choice(["cat", "dog"])} for _ in range(40)]
    gt = [
        g for g in gt if g["bbox_2d"][0] <= g["bbox_2d"][2] and g["bbox_2d"][1] <= g["bbox_2d"][3]
    ]
    pred = [
        {"bbox_2d": _box(rng, rng.choice(gt)["bbox_2d"]), "label": "cat"} for _ in range(150)
    ] + [{"bbox_2d": g["bbox_2d"], "label": g["label"]} for g in gt]
    assert sum(p["label"] == "cat" for p in pred) > MAX_DETECTIONS_PER_LABEL + 40
    completion, solution = f"<answer>{_fence(pred)}</answer>", f"<answer>{_fence(gt)}</answer>"
    for method in MAP_METHODS:
        assert coco_map(completion, solution, method) == reference(completion, solution, method)


# --- the rules, one case each

CAT = {"bbox_2d": [100, 100, 200, 200], "label": "cat"}
DOG = {"bbox_2d": [300, 300, 420, 380], "label": "dog"}
GT = f"<answer>{_fence([CAT, DOG])}</answer>"


@pytest.mark.parametrize(
    ("completion", "solution", "method", "expected"),
    [
        (f"<answer>{_fence([CAT, DOG])}</answer>", GT, "od_ap", 1.0),  # perfect
        ("<answer>None</answer>", "<answer>None</answer>", "od_ap", 1.0),  # both the literal None
        ("<answer>[]</answer>", "<answer>None</answer>", "od_ap50", 1.0),  # both lists empty
        (f"<answer>{_fence([CAT])}</answer>", "<answer>None</answer>", "od_ap", 0.0),  # one empty
        ("<answer>None</answer>", GT, "od_ap", 0.0),  # the other empty
        (_fence([CAT, DOG]), GT, "od_ap", 0.0),  # no answer span: od methods score 0.0
        (_fence([CAT, DOG]), GT, "map", 1.0),  # map reads the whole completion
        # odLength: perfect boxes plus two unreadable ones: AP 1.0 times 2/4
        (f"<answer>{_fence([CAT, DOG, 'x', {}])}</answer>", GT, "odLength", 0.5),
        # a label outside the ground truth is dropped: AP of the cat alone
        (f"<answer>{_fence([CAT, {**DOG, 'label': 'zebra'}])}</answer>", GT, "od_ap50", 0.5),
    ],
)
def test_rules(completion: str, solution: str, method: str, expected: float) -> None:
    assert coco_map(completion, solution, method) == pytest.approx(expected, abs=1e-12)
    assert coco_map(completion, solution, method) == reference(completion, solution, method)


def test_map_takes_the_last_json_block_of_the_whole_completion() -> None:
    draft, final = _fence([DOG]), _fence([CAT, DOG])
    completion = f"<think>{draft}</think><answer>{final}</answer>"
    assert coco_map(completion, GT, "map") == pytest.approx(1.0)  # the answer's block
    completion = f"<think>{draft}</think><answer>{final}</answer> {draft}"
    assert coco_map(completion, GT, "map") == reference(completion, GT, "map") < 1.0


# --- hardening: where the reference crashes, pays garbage, or runs unbounded


@pytest.mark.parametrize(
    ("answer", "expected", "status"),
    [
        # NaN / infinite / float-overflowing coordinates: the box is dropped (reference: scored as a
        # false positive, or ignored), the rest still scores
        ('[{"bbox_2d": [NaN, 1, 2, 3], "label": "cat"}]', 0.0, Status.OK),
        ('[{"bbox_2d": [0, 0, Infinity, 3], "label": "cat"}]', 0.0, Status.OK),
        ('[{"bbox_2d": [0, 0, 1e400, 3], "label": "cat"}]', 0.0, Status.OK),
        ('[{"bbox_2d": [-1.7e308, 0, 1.7e308, 3], "label": "cat"}]', 0.0, Status.OK),
        ('[{"bbox_2d": [0, 0, ' + "9" * 400 + ', 3], "label": "cat"}]', 0.0, Status.OK),
        # booleans and five numbers are not a box (the reference reads true as 1, and the first four)
        ('[{"bbox_2d": [true, 100, 200, 200], "label": "cat"}]', 0.0, Status.OK),
        ('[{"bbox_2d": [100, 100, 200, 200, 5], "label": "cat"}]', 0.0, Status.OK),
        # malformed labels: dropped
        ('[{"bbox_2d": [100, 100, 200, 200], "label": {"a": 1}}]', 0.0, Status.OK),
        ('[{"bbox_2d": [100, 100, 200, 200], "label": null}]', 0.0, Status.OK),
        # not a list: the floor, even against an empty ground truth
        ('{"bbox_2d": [100, 100, 200, 200], "label": "cat"}', 0.0, Status.UNPARSEABLE),
        ("null", 0.0, Status.UNPARSEABLE),
        ('"cat"', 0.0, Status.UNPARSEABLE),
        # does not parse: read as an empty list, as the reference reads it
        ("[{", 0.0, Status.UNPARSEABLE),
        ("[" * 100_000, 0.0, Status.UNPARSEABLE),
    ],
)
def test_malformed_predictions_get_the_floor_and_never_raise(
    answer: str, expected: float, status: Status
) -> None:
    for method in MAP_METHODS:
        score = coco_map_score(f"<answer>```json\n{answer}\n```</answer>", GT, method)
        assert (score.value, score.status) == (expected, status)


def test_non_list_json_scores_the_floor_against_an_empty_ground_truth() -> None:
    # the reference iterates what it parsed: `null` or `{}` reads as no boxes and scores 1.0
    for answer in ("null", "{}", "5"):
        score = coco_map_score(
            f"<answer>```json {answer} ```</answer>", "<answer>None</answer>", "od_ap"
        )
        assert (score.value, score.status) == (0.0, Status.UNPARSEABLE)
    assert (
        coco_map_score("<answer>```json [{ ```</answer>", "<answer>None</answer>", "od_ap").value
        == 1.0
    )


def test_a_block_past_the_json_cap_scores_the_floor() -> None:
    boxes = [CAT] * (MAX_JSON_CHARS // len(json.dumps(CAT)) + 10)
    for solution in (GT, "<answer>None</answer>"):
        score = coco_map_score(f"<answer>{_fence(boxes)}</answer>", solution, "od_ap")
        assert (score.value, score.status) == (0.0, Status.UNPARSEABLE)


def test_a_block_after_a_long_reasoning_trace_is_found() -> None:
    completion = (
        "<think>" + "let me look. " * 10_000 + f"</think><answer>{_fence([CAT, DOG])}</answer>"
    )
    assert len(completion) > 100_000
    assert coco_map(completion, GT, "map") == pytest.approx(1.0)
    assert coco_map(completion, GT, "od_ap") == pytest.approx(1.0)


def test_a_nan_box_is_dropped_but_counts_for_odlength() -> None:
    nan_box = '{"bbox_2d": [NaN, 0, 10, 10], "label": "cat"}'
    answer = f"<answer>```json [{json.dumps(CAT)}, {json.dumps(DOG)}, {nan_box}] ```</answer>"
    assert coco_map(answer, GT, "od_ap") == pytest.approx(1.0)
    assert coco_map(answer, GT, "odLength") == pytest.approx(2 / 3)


def test_a_thousand_boxes_of_one_label_cost_what_100_cost() -> None:
    boxes = [{"bbox_2d": [i, i, i + 50, i + 50], "label": "cat"} for i in range(1000)]
    completion = f"<answer>{_fence(boxes)}</answer>"
    assert len(completion) < MAX_JSON_CHARS
    value = coco_map(completion, GT, "od_ap")
    assert value == reference(completion, GT, "od_ap")


@pytest.mark.parametrize(
    ("solution", "message"),
    [
        ("<answer>```json [{ ```</answer>", "does not parse"),
        ('<answer>```json {"label": "cat"} ```</answer>', "expected a JSON list"),
        ("<answer>```json [5] ```</answer>", "item 0"),
        ('<answer>```json [{"bbox_2d": [0, 0, 5, 5]}] ```</answer>', "label"),
        ('<answer>```json [{"bbox_2d": [0, 0, 5, 5], "label": true}] ```</answer>', "label"),
        ('<answer>```json [{"bbox_2d": [0, 0, 5], "label": "cat"}] ```</answer>', "bbox_2d"),
        ('<answer>```json [{"bbox_2d": [0, 0, NaN, 5], "label": "cat"}] ```</answer>', "bbox_2d"),
        ('<answer>```json [{"bbox_2d": [9, 0, 5, 5], "label": "cat"}] ```</answer>', "x1 <= x2"),
        ('<answer>```json [{"bbox_2d": [0, 0, 2e5, 2e5], "label": "cat"}] ```</answer>', "area"),
        ("<answer>[{]</answer>", "does not parse"),  # a bare list that does not parse
        (None, "expected a string"),
    ],
)
def test_malformed_ground_truth_is_a_dataset_error(solution: Any, message: str) -> None:
    # whatever the completion holds: boxes, no answer span, nothing readable
    for completion in (f"<answer>{_fence([CAT])}</answer>", "no answer", "<answer>?</answer>"):
        for method in MAP_METHODS:
            with pytest.raises(ValueError, match=f"solution.*{message}"):
                coco_map_score(completion, solution, method)


def test_a_ground_truth_answer_past_the_span_cap_is_a_dataset_error_not_cut() -> None:
    boxes = [CAT] * (MAX_JSON_CHARS // len(json.dumps(CAT)) + 10)
    solution = f"<answer>{_fence(boxes)}</answer>"
    with pytest.raises(ValueError, match="solution: the answer span reaches"):
        coco_map_score(f"<answer>{_fence([CAT])}</answer>", solution, "od_ap")
    assert coco_map(_fence([CAT]), solution, "map") == reference(_fence([CAT]), solution, "map")


def test_a_bare_list_ground_truth_is_read() -> None:
    # the reference reads a ground truth without a json fence as no boxes at all
    solution = f"<answer>{json.dumps([CAT, DOG])}</answer>"
    for method in MAP_METHODS:
        value = coco_map(f"<answer>{_fence([CAT, DOG])}</answer>", solution, method)
        assert value == pytest.approx(1.0)


def test_ground_truth_without_an_answer_tag_is_read_whole() -> None:
    # the reference crashes (re.findall on None) when the solution has no <answer> span
    value = coco_map(f"<answer>{_fence([CAT, DOG])}</answer>", _fence([CAT, DOG]), "od_ap")
    assert value == pytest.approx(1.0)


def test_a_perfect_answer_scores_as_the_reference_just_under_one() -> None:
    # COCOeval's precision is tp / (tp + fp + eps): the reference's perfect score is 1 - 2.2e-16
    completion = f"<answer>{_fence([CAT, DOG])}</answer>"
    assert coco_map(completion, GT, "od_ap") == reference(completion, GT, "od_ap") < 1.0


def test_odd_inputs_never_raise() -> None:
    rng = random.Random(3)
    alphabet = [
        "```json",
        "```",
        "<answer>",
        "</answer>",
        "[",
        "]",
        "{",
        "}",
        ",",
        '"label"',
        ":",
        '"cat"',
        '"bbox_2d"',
        "1",
        "-2.5",
        "NaN",
        "1e400",
        "null",
        "true",
        " ",
    ]
    for _ in range(500):
        completion = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        for method in MAP_METHODS:
            score = coco_map_score(completion, GT, method)
            assert 0.0 <= score.value <= 1.0 and math.isfinite(score.value)
    for content in (None, 5, b"bytes", ["list"]):
        assert coco_map_score(content, GT, "map").value == 0.0  # type: ignore[arg-type]


def test_nothing_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    coco_map(f"<answer>{_fence([CAT])}</answer>", GT, "od_ap")
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("method", MAP_METHODS)
def test_accuracy_dispatches_the_map_methods(method: str) -> None:
    completion = f"<answer>{_fence([CAT])}</answer>"
    assert accuracy_score(completion, GT, method) == coco_map_score(completion, GT, method)


def test_unknown_method_is_a_dataset_error() -> None:
    with pytest.raises(ValueError, match="accu_reward_method"):
        coco_map_score("", GT, "mAP")


# --- batch form (TRL's call: message-list completions, keyword columns, log_metric)


def test_batch_forms_score_mask_and_log_like_trl() -> None:
    from skyrl_rewards import make_reward

    # a fresh instance: the shared accuracy_reward warns once per cause for the whole process
    accuracy_reward = make_reward("accuracy")

    bad_gt = '<answer>```json [{"bbox_2d": [0, 0, 5], "label": "cat"}] ```</answer>'
    completions = [
        [{"role": "assistant", "content": f"<answer>{_fence([CAT, DOG])}</answer>"}],
        [{"role": "assistant", "content": f"<answer>{_fence([CAT])}</answer>"}],
        [{"role": "assistant", "content": "no boxes"}],
        [{"role": "assistant", "content": f"<answer>{_fence([CAT])}</answer>"}],
    ]
    solution = [GT, GT, GT, bad_gt]
    methods = ["od_ap", "od_ap50", "odLength", "map"]
    logged: list[tuple[str, float]] = []

    def log_metric(name: str, value: float) -> None:
        logged.append((name, value))

    rewards = accuracy_reward(
        completions,
        solution=solution,
        accu_reward_method=methods,
        prompts=["p"] * 4,
        log_metric=log_metric,
    )
    expected = [
        coco_map(c[0]["content"], s, m)
        for c, s, m in zip(completions[:3], solution[:3], methods[:3], strict=True)
    ]
    assert rewards[:3] == expected and rewards[3] is None  # the bad ground truth is masked
    assert expected[0] == pytest.approx(1.0) and expected[1] == pytest.approx(0.5)
    assert expected[2] == 0.0
    assert any(value > 0 for _, value in logged)
    named = make_reward("coco_map", method="od_ap50")
    assert named.__name__ == "coco_map_reward"
    assert named(completions, solution=solution) == [
        coco_map(c[0]["content"], s, "od_ap50")
        for c, s in zip(completions[:3], solution[:3], strict=True)
    ] + [None]
    with pytest.raises(ValueError, match="rewards.coco_map: method"):
        make_reward("coco_map", method="mAP")


# --- where the reference differs, shown side by side (docs/rewards.md, "COCO mAP")

_BIG_INT = "9" * 400
_INVERTED_GT = '<answer>```json [{"bbox_2d": [200, 100, 100, 200], "label": "cat"}] ```</answer>'


@pytest.mark.parametrize(
    ("answer", "solution", "ours", "theirs"),
    [
        # a NaN box written first: the reference counts it as a false positive
        ('[{"bbox_2d": [NaN, 0, 10, 10], "label": "cat"}, CAT]', GT, 0.5, 0.25),
        # one integer past float range: the reference crashes (None here)
        (f'[CAT, {{"bbox_2d": [0, 0, {_BIG_INT}, 10], "label": "dog"}}]', GT, 0.5, None),
        # JSON null against an empty ground truth: the reference reads it as no boxes
        ("null", "<answer>None</answer>", 0.0, 1.0),
    ],
)
def test_where_the_reference_differs(
    answer: str, solution: str, ours: float, theirs: float | None
) -> None:
    completion = f"<answer>```json {answer.replace('CAT', json.dumps(CAT))} ```</answer>"
    assert coco_map(completion, solution, "od_ap") == pytest.approx(ours)
    if theirs is None:
        with pytest.raises(OverflowError):
            reference(completion, solution, "od_ap")
    else:
        assert reference(completion, solution, "od_ap") == pytest.approx(theirs)


def test_the_reference_scores_a_ground_truth_box_coco_ignores_minus_one() -> None:
    completion = f"<answer>{_fence([CAT])}</answer>"
    assert reference(completion, _INVERTED_GT, "od_ap") == -1.0
    with pytest.raises(ValueError, match="x1 <= x2"):
        coco_map(completion, _INVERTED_GT, "od_ap")


def test_threads_get_the_same_values_and_stdout_is_restored() -> None:
    import sys
    from concurrent.futures import ThreadPoolExecutor

    rng = random.Random(11)
    cases = [texts(rng, *scene(rng)) for _ in range(40)]
    stdout = sys.stdout
    alone = [coco_map(c, s, "od_ap") for c, s in cases]
    with ThreadPoolExecutor(max_workers=4) as executor:
        threaded = list(executor.map(lambda case: coco_map(*case, "od_ap"), cases))
    assert threaded == alone and sys.stdout is stdout
