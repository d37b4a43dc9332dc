"""GUI rewards: GUI-R1's action accuracy and GUI-G2's Gaussian rewards, against their procedures."""

from __future__ import annotations

import json
import math
import pickle
import random
import re
import time
from typing import Any

import numpy as np
import pytest

from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.geometry.box_formats import FAMILIES, row_converter
from skyrl_rewards.rewards.gui.gui import (
    GuiActionParams,
    GuiPointParams,
    gaussian_plane,
    gaussian_point,
    gui_action_reward,
    gui_action_score,
    gui_point_reward,
    gui_point_score,
    target_box,
    text_f1,
)
from skyrl_rewards.rewards.gui.gui_actions import (
    MAX_ACTION_CHARS,
    Action,
    canonical_action,
    parse_action,
    parse_location,
    target_action,
)

# --- the reference: GUI-R1's procedure (verl/utils/reward_score/r1gui.py of ritzz-ai/GUI-R1:
# calculate_f1_score, extract_action, extract_input_text, extract_coord, r1gui_accuracy_reward),
# step by step. Its ground truth is json.dumps({"action", "gt_bbox", "input_text"}).

_R1_ANSWER = r"<answer>(.*?)</answer>"


def _r1_answer(content: str) -> str | None:
    match = re.search(_R1_ANSWER, content, re.DOTALL)  # the first tag
    return match.group(1).strip() if match else None


def r1gui_f1(predicted: str, truth: str) -> float:
    predicted = predicted.replace("[", "").replace("]", "")
    truth = truth.replace("[", "").replace("]", "")
    pred, gold = set(predicted.lower().split()), set(truth.lower().split())
    if len(pred) == 1 and len(gold) == 1:
        (p,), (g,) = pred, gold
        if p in g or g in p:
            return 1
    common = pred & gold
    precision = len(common) / len(pred) if pred else 0
    recall = len(common) / len(gold) if gold else 0
    return 0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def r1gui_action(content: str) -> str:
    answer = _r1_answer(content)
    match = re.search(r"'action':\s*'(\w+)'", answer) if answer is not None else None
    return match.group(1) if match else "no action"


def r1gui_input_text(content: str) -> str:
    answer = _r1_answer(content)
    match = re.search(r"'input_text':\s*'(.*?)'", answer) if answer is not None else None
    return match.group(1) if match else "no input text"


def r1gui_coord(content: str) -> list[int]:
    # Without an answer tag the reference tries a pattern that does not compile (an unbalanced
    # parenthesis); its bare except returns [0, 0, 0, 0]: no coordinates, read as (0, 0).
    answer = _r1_answer(content)
    match = re.search(r"\{.*\[(\d+),\s*(\d+)]\s*.*\}", answer) if answer is not None else None
    return [int(match.group(1)), int(match.group(2))] if match else [0, 0, 0, 0]


def r1gui_accuracy(predict_str: str, ground_truth: str) -> float:
    try:
        truth = json.loads(ground_truth)
        gt_action, gt_bbox, gt_text = truth["action"].lower(), truth["gt_bbox"], truth["input_text"]
        pred_action = r1gui_action(predict_str).lower()
        pred_text = r1gui_input_text(predict_str)
        pred = r1gui_coord(predict_str)
        if pred_action != gt_action:
            return 0.0
        if gt_action == "click":
            if len(gt_bbox) == 2:
                hit = (pred[0] - gt_bbox[0]) ** 2 + (pred[1] - gt_bbox[1]) ** 2 < 140**2
                return 1.0 if hit else 0.0
            if len(gt_bbox) == 4:
                inside = gt_bbox[0] < pred[0] < gt_bbox[2] and gt_bbox[1] < pred[1] < gt_bbox[3]
                return 1.0 if inside else 0.0
            return 0.0
        if gt_action in ("type", "select", "scroll"):
            return 1.0 if r1gui_f1(pred_text, gt_text) >= 0.5 else 0.0
        return 1.0
    except Exception:  # the reference's catch-all
        return 0.0


# --- the reference: GUI-G2's procedure (src/gui_g2/src/open_r1/gaussian_grpo.py of ZJU-REAL/GUI-G2:
# gaussian_point_reward, gaussian_plane_reward), step by step, with numpy as there.

_G2_BOX = (
    r"\[(\s*-?\d*\.?\d+\s*),\s*(\s*-?\d*\.?\d+\s*),\s*(\s*-?\d*\.?\d+\s*),\s*(\s*-?\d*\.?\d+\s*)\]"
)


def g2_point(pred: list[float], gt: list[float]) -> float:
    alpha = 0.5
    pcx, pcy = (pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2
    gcx, gcy = (gt[0] + gt[2]) / 2, (gt[1] + gt[3]) / 2
    sigma_x, sigma_y = alpha * (gt[2] - gt[0]), alpha * (gt[3] - gt[1])
    exponent = -0.5 * ((pcx - gcx) ** 2 / sigma_x**2 + (pcy - gcy) ** 2 / sigma_y**2)
    return round(math.exp(exponent), 3)


def g2_plane(pred: list[float], gt: list[float]) -> float:
    alpha, eps = 0.5, 1e-8
    pred_mu = np.array([(pred[0] + pred[2]) / 2, (pred[1] + pred[3]) / 2])
    gt_mu = np.array([(gt[0] + gt[2]) / 2, (gt[1] + gt[3]) / 2])
    pred_cov = np.diag([((pred[2] - pred[0]) * alpha) ** 2, ((pred[3] - pred[1]) * alpha) ** 2])
    gt_cov = np.diag([((gt[2] - gt[0]) * alpha) ** 2, ((gt[3] - gt[1]) * alpha) ** 2])
    sigma_avg = (pred_cov + gt_cov) / 2
    mu_diff = pred_mu - gt_mu
    term1 = (1 / 8) * mu_diff.T @ np.linalg.inv(sigma_avg + eps * np.eye(2)) @ mu_diff
    det_avg, det_pred, det_gt = (np.linalg.det(m) for m in (sigma_avg, pred_cov, gt_cov))
    term2 = 0.5 * np.log(det_avg / np.sqrt(det_pred * det_gt + eps))
    return round(float(np.exp(-(term1 + term2))), 3)


def g2_reward(content: str, sol: list[float], form: str) -> float:
    content = content.split("assistant\n")[-1]
    match = re.search(_G2_BOX, content.strip(), re.DOTALL)
    try:
        if match:
            box = [float(match.group(i)) for i in range(1, 5)]
            return (g2_point if form == "point" else g2_plane)(box, [float(n) for n in sol])
    except Exception:  # the reference's catch-all
        pass
    return 0.0


G2_ROUNDING = 5.01e-4
"""GUI-G2 rounds to 3 decimals; we do not (a tail of 0.0004 stays 0.0004, not 0.0)."""


# --- the grammar: what the policy may write

CLICK_TRUTH = '{"action": "click", "bbox": [100, 200, 180, 240]}'


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        # GUI-R1: a Python-literal list of action dicts in the answer tag
        (
            "<think>t</think><answer>[{'action': 'click', 'point': [120, 210], 'input_text': 'no input text'}]</answer>",
            Action("click", (120.0, 210.0), None, "no input text"),
        ),
        # JSON, double quotes
        ('{"action": "click", "point": [120, 210]}', Action("click", (120.0, 210.0))),
        # AndroidControl: action_type with x / y
        ('{"action_type": "click", "x": 120, "y": 210}', Action("click", (120.0, 210.0))),
        # Qwen2.5-VL computer use: a tool call wrapping the arguments; left_click is click
        (
            '<tool_call>{"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [120, 210]}}</tool_call>',
            Action("click", (120.0, 210.0)),
        ),
        # function style, positional and keywords; UI-TARS's start_box string
        ("click(120, 210)", Action("click", (120.0, 210.0))),
        ("click(x=120, y=210)", Action("click", (120.0, 210.0))),
        (
            "Thought: the (blue) button\nAction: click(start_box='(120,210)')",
            Action("click", (120.0, 210.0)),
        ),
        # a box for a point action: its centre, the box kept
        (
            "click([100, 200, 140, 220])",
            Action("click", (120.0, 210.0), (100.0, 200.0, 140.0, 220.0)),
        ),
        # text and direction
        ('type("hello world")', Action("type", text="hello world")),
        ('{"action_type": "type", "text": "don\'t stop"}', Action("type", text="don't stop")),
        ("scroll(down)", Action("scroll", text="down", direction="down")),
        ('scroll(direction="UP")', Action("scroll", direction="UP")),
        ("press_back()", Action("press_back")),
        # GUI-R1 writes a scroll's direction in input_text
        (
            "<answer>[{'action': 'scroll', 'point': [-100, -100], 'input_text': 'LEFT'}]</answer>",
            Action("scroll", (-100.0, -100.0), None, "LEFT", "LEFT"),
        ),
        # the first action of a list; the last answer tag
        (
            "<answer>x</answer><answer>[{'action': 'press_home'}, {'action': 'click', 'point': [1, 2]}]</answer>",
            Action("press_home"),
        ),
        # cut short after the action name: json-repair reads it
        ("<answer>[{'action': 'complete', </answer>", Action("complete")),
        # nothing readable
        ("I would click the button", None),
        ("<answer></answer>", None),
        ("<answer>[{'point': [1, 2]}]</answer>", None),
    ],
)
def test_parse_action(content: str, expected: Action | None) -> None:
    assert parse_action(content) == expected


@pytest.mark.parametrize(
    ("content", "point", "box"),
    [
        ("[10, 20, 30, 40]", (20.0, 30.0), (10.0, 20.0, 30.0, 40.0)),  # GUI-G2's answer
        ('{"bbox_2d": [10, 20, 30, 40], "label": "ok"}', (20.0, 30.0), (10.0, 20.0, 30.0, 40.0)),
        ("The button is at (12, 34).", (12.0, 34.0), None),
        ("<answer>[.5, 7]</answer>", (0.5, 7.0), None),
        ("click(5, 6)", (5.0, 6.0), None),
    ],
)
def test_parse_location(content: str, point: tuple, box: tuple | None) -> None:
    location = parse_location(content)
    assert location is not None and location.point == point and location.box == box


def test_aliases_and_canonical_names() -> None:
    assert canonical_action(" Press Back ") == "press_back"
    assert canonical_action("navigate_back") == "press_back"
    assert canonical_action("TAP") == "click"
    assert canonical_action("input_text") == "type"


# --- gui_action: the table of what pays


@pytest.mark.parametrize(
    ("content", "solution", "expected"),
    [
        ("click(120, 210)", CLICK_TRUTH, 1.0),  # inside the box
        ("click(100, 210)", CLICK_TRUTH, 0.0),  # on the edge: strictly inside, as GUI-R1
        ("click(300, 210)", CLICK_TRUTH, 0.0),  # outside
        ("long_press(120, 210)", CLICK_TRUTH, 0.0),  # wrong type
        ("click()", CLICK_TRUTH, 0.0),  # right type, no point
        (
            '{"action": "click", "point": [230, 300]}',
            '{"action": "click", "point": [200, 200]}',
            1.0,
        ),
        (
            '{"action": "click", "point": [300, 300]}',
            '{"action": "click", "point": [200, 200]}',
            0.0,
        ),
        # a row's radius wins over the reward's (140)
        (
            '{"action": "click", "point": [230, 200]}',
            '{"action": "click", "point": [200, 200], "radius": 20}',
            0.0,
        ),
        (
            'type("shanghai shopping mall")',
            '{"action": "type", "text": "shopping mall"}',
            1.0,
        ),  # F1 0.8
        (
            'type("the big shanghai mall")',
            '{"action": "type", "text": "shopping mall"}',
            0.0,
        ),  # F1 0.33
        ('type("mall")', '{"action": "type", "text": "shopping mall"}', 1.0),  # F1 0.67
        ('select("[Large]")', '{"action": "select", "text": "large"}', 1.0),  # brackets dropped
        ("scroll(down)", '{"action": "scroll", "direction": "down"}', 1.0),
        ("scroll(up)", '{"action": "scroll", "direction": "down"}', 0.0),
        ('scroll("down left")', '{"action": "scroll", "direction": "down"}', 0.0),  # hedged
        ("press_back()", '{"action": "press_back"}', 1.0),
        ('{"action_type": "navigate_back"}', '{"action": "press_back"}', 1.0),  # alias
        ("press_home()", '{"action": "press_back"}', 0.0),
        ('open_app("Settings")', '{"action": "open_app", "text": "settings"}', 1.0),
        ('open_app("Chrome")', '{"action": "open_app", "text": "settings"}', 0.0),
        # GUI-R1's own ground truth rows
        (
            "<answer>[{'action': 'scroll', 'point': [-100, -100], 'input_text': 'left'}]</answer>",
            '{"action": "scroll", "gt_bbox": [-100, -100], "input_text": "LEFT"}',
            1.0,
        ),
        (
            "<answer>[{'action': 'click', 'point': [50, 60], 'input_text': 'no input text'}]</answer>",
            '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": "no input text"}',
            1.0,
        ),
    ],
)
def test_gui_action_table(content: str, solution: str, expected: float) -> None:
    assert gui_action_reward(content, solution) == expected


def test_statuses_and_type_credit() -> None:
    target = target_action(CLICK_TRUTH)
    assert gui_action_score("nothing here", target).status is Status.UNPARSEABLE
    assert gui_action_score("click(300, 210)", target) == gui_action_score("press_back()", target)
    credit = GuiActionParams(type_credit=0.2)
    assert gui_action_score("click(300, 210)", target, credit).value == 0.2
    assert gui_action_score("press_back()", target, credit).value == 0.0
    assert gui_action_score("click(120, 210)", target, credit).value == 1.0


def test_parameters() -> None:
    wide = {"radius_px": 200}
    assert (
        gui_action_reward(
            '{"action": "click", "point": [350, 200]}',
            '{"action": "click", "point": [200, 200]}',
            **wide,
        )
        == 1.0
    )
    strict = {"f1_threshold": 0.9}
    assert (
        gui_action_reward('type("mall")', '{"action": "type", "text": "shopping mall"}', **strict)
        == 0.0
    )
    assert gui_action_reward('type("e")', '{"action": "type", "text": "settings"}') == 0.0
    assert (
        gui_action_reward(
            'type("e")', '{"action": "type", "text": "settings"}', substring_match=True
        )
        == 1.0
    )
    for bad in (
        {"radius_px": 0},
        {"radius_px": math.inf},
        {"f1_threshold": 1.5},
        {"type_credit": -1},
        {"substring_match": "yes"},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            GuiActionParams(**bad)
    for bad_point in ({"form": "box"}, {"sigma_scale": 0}, {"sigma_scale": "x"}):
        with pytest.raises(ValueError, match=next(iter(bad_point))):
            GuiPointParams(**bad_point)


@pytest.mark.parametrize(
    "solution",
    [
        None,
        42,
        "not json",
        "[1, 2, 3, 4]",  # a box, no action
        '{"point": [1, 2]}',  # no action name
        '{"action": ""}',
        '{"action": "click"}',  # a click needs a target
        '{"action": "click", "bbox": [10, 10, 10, 20]}',  # no area
        '{"action": "click", "bbox": [10, 10, "a", 20]}',
        '{"action": "click", "point": [1, 2], "radius": -3}',
        '{"action": "click", "point": [1, 2], "radius": true}',
        '{"action": "type"}',
        '{"action": "type", "text": "  "}',
        '{"action": "scroll", "direction": "sideways"}',
        '{"action": "scroll", "input_text": "up down"}',
    ],
)
def test_malformed_ground_truth_names_solution(solution: Any) -> None:
    with pytest.raises(ValueError, match="^solution"):
        gui_action_reward("click(1, 2)", solution)


def test_ground_truth_as_dict_and_in_answer_tag() -> None:
    assert target_action({"action_type": "CLICK", "point": [1, 2]}).point == (1.0, 2.0)
    assert target_action('<answer>{"action": "press_back"}</answer>').name == "press_back"
    assert target_action('{"action": "press_back", "bbox": "junk"}').name == "press_back"  # unused


# --- box formats: coordinates converted to original pixels before any comparison

# A 640x480 image is seen by Qwen2.5-VL as 644x476 pixels; on Qwen3-VL's 0-1000 grid.


def test_box_formats_convert_points_and_boxes(image_640x480: str) -> None:
    row = {"image_path": image_640x480}
    qwen25 = row_converter(row, FAMILIES["qwen2_5_vl"])
    qwen3 = row_converter(row, FAMILIES["qwen3_vl"])
    target = target_action('{"action": "click", "bbox": [315, 235, 325, 245]}')
    assert gui_action_score("click(322, 238)", target, convert=qwen25).value == 1.0  # (320, 240)
    assert gui_action_score("click(320, 244)", target, convert=qwen25).value == 0.0  # y 246.1
    assert gui_action_score("click(500, 500)", target, convert=qwen3).value == 1.0
    assert gui_action_score("click(500, 500)", target).value == 0.0  # as written: misses
    box = target_box("[160, 120, 480, 360]")
    point = GuiPointParams("point")
    plane = GuiPointParams("plane")
    assert gui_point_score(
        "[250, 250, 750, 750]", box, plane, convert=qwen3
    ).value == pytest.approx(1.0)
    assert gui_point_score("(500, 500)", box, point, convert=qwen3).value == pytest.approx(1.0)
    assert gui_point_score(
        "[161, 119, 483, 357]", box, plane, convert=qwen25
    ).value == pytest.approx(1.0)


# --- gui_point: GUI-G2's Gaussians


def test_gaussian_shapes() -> None:
    box = (0.0, 0.0, 100.0, 40.0)  # sigma (50, 20)
    assert gaussian_point((50, 20), box) == 1.0
    assert gaussian_point((100, 20), box) == pytest.approx(math.exp(-0.5))  # one sigma in x
    assert gaussian_point((50, 40), box) == pytest.approx(math.exp(-0.5))  # one sigma in y
    assert gaussian_point((50, 20), box, sigma_scale=0.25) == 1.0
    assert gaussian_point((1e300, 1e300), box) == 0.0
    assert gaussian_plane(box, box) == 1.0
    assert gaussian_plane((0, 0, 50, 40), box) < gaussian_plane((0, 0, 90, 40), box) < 1.0
    assert gaussian_plane((10, 0, 110, 40), box) < 1.0
    assert gaussian_plane((0, 0, 0, 40), box) == 0.0  # no width
    assert gaussian_plane((0, 0, 1e300, 1e300), box) == 0.0


def test_gui_point_forms_and_statuses() -> None:
    box = target_box({"bbox": [0, 0, 100, 40]})
    assert gui_point_score("[0, 0, 100, 40]", box).value == 1.0
    assert gui_point_score("(50, 20)", box, GuiPointParams("plane")) == gui_point_score(
        "click(50, 20)", box, GuiPointParams("plane")
    )
    assert gui_point_score("(50, 20)", box, GuiPointParams("plane")).value == 0.0  # no extent
    assert gui_point_score("[100, 40, 0, 0]", box).value == 0.0  # inverted
    assert gui_point_score("no box", box).status is Status.UNPARSEABLE
    assert gui_point_reward('{"action": "click", "coordinate": [50, 20]}', [0, 0, 100, 40]) == 1.0
    both = GuiPointParams("both")
    assert gui_point_score("[0, 0, 100, 40]", box, both).value == 2.0  # GUI-G2: point + plane
    near = "[10, 0, 110, 40]"
    assert gui_point_score(near, box, both).value == pytest.approx(
        gui_point_reward(near, box, form="point") + gui_point_reward(near, box, form="plane")
    )
    assert gui_point_score("(50, 20)", box, both).value == 1.0  # a point has no plane term


@pytest.mark.parametrize(
    "solution", [None, "[0, 0, 0, 10]", "[1, 2, 3]", '{"point": [1, 2]}', "x", [0, 0, "a", 1]]
)
def test_gui_point_malformed_ground_truth(solution: Any) -> None:
    with pytest.raises(ValueError, match="^solution"):
        gui_point_reward("[0, 0, 10, 10]", solution)


# --- model text never raises, and stays cheap

ADVERSARIAL = [
    "",
    "x" * 1_000_000,
    "{" * 3000 + "}" * 3000,
    "[" * 5000,
    "(" * 5000,
    "click(" * 3000,
    "a(" + "x" * 10_000,
    "[1" + " " * 10_000 + "x",
    "{'a': " * 2000,
    '{"action": "click", "point": [1e999, 5]}',
    '{"action": "click", "point": [' + "9" * 5000 + ", 5]}",
    "click(" + "9" * 5000 + ", 5)",
    '{"action": "type", "text": "' + "a b " * 5000 + '"}',
    "<answer>" * 1000 + "</answer>" * 1000,
    "click(float('nan'), 1)",
    "click(__import__('os').system('true'), 1)",
    '{"action": ["click"], "point": {"x": "1"}}',
    "\x00\ud800",
]


@pytest.mark.parametrize("content", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_model_text_never_raises(content: str) -> None:
    start = time.process_time()
    for solution in (
        CLICK_TRUTH,
        '{"action": "type", "text": "a"}',
        '{"action": "scroll", "direction": "up"}',
    ):
        assert 0.0 <= gui_action_reward(content, solution) <= 1.0
    for form in ("point", "plane"):
        assert 0.0 <= gui_point_reward(content, [0, 0, 10, 10], form=form) <= 1.0
    assert time.process_time() - start < 1.0


def test_answer_span_is_capped() -> None:
    late = "x" * MAX_ACTION_CHARS + " click(120, 210)"
    assert gui_action_reward(f"<answer>{late}</answer>", CLICK_TRUTH) == 0.0
    assert gui_action_reward(f"{'x' * 50_000}<answer>click(120, 210)</answer>", CLICK_TRUTH) == 1.0


# --- differential: GUI-R1 on generated cases, in the grammar both read

GUI_R1_ACTIONS = [
    "click",
    "type",
    "select",
    "scroll",
    "press_back",
    "press_home",
    "complete",
    "enter",
]
WORDS = [
    "shanghai",
    "shopping",
    "mall",
    "weather",
    "paris",
    "settings",
    "wifi",
    "[on]",
    "alarm",
    "7am",
    "news",
    "shop",  # inside "shopping"
    "set",  # inside "settings"
]


def _r1_truth(rng: random.Random) -> dict[str, Any]:
    action = "click" if rng.random() < 0.3 else rng.choice(GUI_R1_ACTIONS)
    truth: dict[str, Any] = {
        "action": action,
        "gt_bbox": [-100, -100],
        "input_text": "no input text",
    }
    if action == "click":
        if rng.random() < 0.5:  # a point, away from the origin (see _r1_case)
            truth["gt_bbox"] = [rng.randint(200, 1800), rng.randint(200, 1800)]
        else:
            x, y = rng.randint(1, 1800), rng.randint(1, 1800)
            truth["gt_bbox"] = [x, y, x + rng.randint(1, 300), y + rng.randint(1, 300)]
    elif action in ("type", "select"):
        truth["input_text"] = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
    elif action == "scroll":
        truth["input_text"] = rng.choice(["up", "down", "left", "right", "UP", "Down"])
    if rng.random() < 0.2:
        truth["action"] = truth["action"].upper()
    return truth


def _r1_prediction(rng: random.Random, truth: dict[str, Any]) -> dict[str, Any]:
    action = truth["action"].lower() if rng.random() < 0.7 else rng.choice(GUI_R1_ACTIONS)
    pred: dict[str, Any] = {"action": action if rng.random() < 0.9 else action.upper()}
    box = truth["gt_bbox"]
    if rng.random() < 0.9:
        if len(box) == 4 and rng.random() < 0.7:  # near or inside the box, edges included
            pred["point"] = [
                rng.randint(max(0, box[0] - 5), box[2] + 5),
                rng.randint(max(0, box[1] - 5), box[3] + 5),
            ]
        elif len(box) == 2 and rng.random() < 0.7:  # around the point, both sides of 140
            pred["point"] = [
                max(0, box[0] + rng.randint(-160, 160)),
                max(0, box[1] + rng.randint(-160, 160)),
            ]
        else:
            pred["point"] = rng.choice([[-100, -100], [rng.randint(0, 2000), rng.randint(0, 2000)]])
    if rng.random() < 0.9:
        text = truth["input_text"]
        kind = rng.random()
        if kind < 0.3:
            pred["input_text"] = text
        elif kind < 0.6 and text != "no input text":
            words = text.split() + rng.sample(WORDS, rng.randint(0, 2))
            pred["input_text"] = " ".join(rng.sample(words, rng.randint(1, len(words))))
        elif kind < 0.8:
            pred["input_text"] = rng.choice(
                ["up", "down", "left", "right", "no input text", "wifi"]
            )
        else:
            pred["input_text"] = " ".join(rng.sample(WORDS, rng.randint(1, 3)))
    return pred


def _r1_case(rng: random.Random) -> tuple[str, str]:
    """A completion and a ground truth in GUI-R1's shapes.

    Kept to what both read the same way (each departure is a row of GUI_R1_DIFFERENCES):
    Python-literal dicts with single quotes, one action, one line, one answer tag; integer,
    non-negative points; texts without apostrophes; names GUI-R1's ``\\w+`` reads; one
    direction word per scroll; target points at least 200 px from the origin (an
    unreadable point is (0, 0) to GUI-R1).
    """
    truth = _r1_truth(rng)
    kind = rng.random()
    if kind < 0.85:
        answer = repr([_r1_prediction(rng, truth)])
    elif kind < 0.9:  # cut short inside the dict
        answer = repr([_r1_prediction(rng, truth)])[: rng.randint(1, 12)]
    else:  # junk both read as nothing
        answer = rng.choice(["", "none", "I cannot tell", "{}", "[{'point': [10, 20]}]"])
    think = rng.choice(["", "<think>Look at the screen first.</think>\n", "<think>x</think> "])
    return f"{think}<answer>{answer}</answer>", json.dumps(truth)


def test_gui_r1_differential() -> None:
    rng = random.Random(30)
    counts = {0.0: 0, 1.0: 0}
    substring_cases = 0
    for _ in range(600):
        content, truth = _r1_case(rng)
        expected = r1gui_accuracy(content, truth)
        assert gui_action_reward(content, truth, substring_match=True) == expected, (content, truth)
        ours = gui_action_reward(content, truth)  # the default drops the one-word substring rule
        if ours != expected:
            pred, gold = (
                r1gui_input_text(content).lower().split(),
                json.loads(truth)["input_text"].lower().split(),
            )
            assert (
                len(pred) == len(gold) == 1
                and pred != gold
                and (pred[0] in gold[0] or gold[0] in pred[0])
            )
            substring_cases += 1
        counts[expected] += 1
    assert min(counts.values()) > 150  # both outcomes well covered
    assert substring_cases < 40


GUI_R1_DIFFERENCES = [
    # (completion, ground truth, GUI-R1, ours, why)
    (
        '<answer>[{"action": "click", "point": [50, 60]}]</answer>',
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        0.0,
        1.0,
        "JSON with double quotes: GUI-R1 reads only single-quoted keys",
    ),
    (
        "[{'action': 'click', 'point': [50, 60]}]",
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        0.0,
        1.0,
        "no answer tag: we read the whole text, as every reward here",
    ),
    (
        "<answer>[{'action': 'close/delete'}]</answer>",
        '{"action": "close/delete", "gt_bbox": [0, 0], "input_text": ""}',
        0.0,
        1.0,
        "GUI-R1's \\w+ cannot read its own close/delete",
    ),
    (
        "<answer>[{'action': 'click', 'point': [50.5, 60.5]}]</answer>",
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        0.0,
        1.0,
        "decimal coordinates",
    ),
    (
        "<answer>[{'action': 'click', 'point': [45, 55, 55, 65]}]</answer>",
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        0.0,
        1.0,
        "a box for a click: its centre",
    ),
    (
        "<answer>[{'action': 'type', 'input_text': \"don't stop\"}]</answer>",
        '{"action": "type", "gt_bbox": [0, 0], "input_text": "don\'t stop"}',
        0.0,
        1.0,
        "an apostrophe ends GUI-R1's text",
    ),
    (
        "<answer>[{'action': 'open_app', 'input_text': 'Chrome'}]</answer>",
        '{"action": "open_app", "gt_bbox": [0, 0], "input_text": "Settings"}',
        1.0,
        0.0,
        "open_app's app name is checked (GUI-R1 pays any)",
    ),
    (
        "<answer>[{'action': 'type', 'input_text': 'e'}]</answer>",
        '{"action": "type", "gt_bbox": [0, 0], "input_text": "settings"}',
        1.0,
        0.0,
        "one word inside the other is not a match by default (substring_match)",
    ),
    (
        "<answer>[{'action': 'scroll', 'input_text': 'down left'}]</answer>",
        '{"action": "scroll", "gt_bbox": [0, 0], "input_text": "down"}',
        1.0,
        0.0,
        "a hedged direction has none",
    ),
    (
        "<answer>[{'action': 'scroll', 'input_text': 'upward'}]</answer>",
        '{"action": "scroll", "gt_bbox": [0, 0], "input_text": "up"}',
        1.0,
        0.0,
        "a direction is a word, not a substring",
    ),
    (
        "<answer>x</answer> <answer>[{'action': 'press_back'}]</answer>",
        '{"action": "press_back", "gt_bbox": [0, 0], "input_text": ""}',
        0.0,
        1.0,
        "the last answer tag, as every reward here",
    ),
    (
        "<answer>[{'action': 'tap', 'point': [50, 60]}]</answer>",
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        0.0,
        1.0,
        "aliases: tap is click",
    ),
    (
        "<answer>[{'action': 'click'}]</answer>",
        '{"action": "click", "gt_bbox": [50, 50], "input_text": ""}',
        1.0,
        0.0,
        "no point is a miss (GUI-R1 clicks at (0, 0))",
    ),
    (
        "<answer>[{'action': 'click', 'point': [500, 500]}, {'action': 'click', 'point': [50, 60]}]</answer>",
        '{"action": "click", "gt_bbox": [40, 50, 60, 70], "input_text": ""}',
        1.0,
        0.0,
        "one action: GUI-R1 takes the first name and the last point",
    ),
]


@pytest.mark.parametrize(
    ("content", "truth", "reference", "ours", "why"),
    GUI_R1_DIFFERENCES,
    ids=[d[4] for d in GUI_R1_DIFFERENCES],
)
def test_gui_r1_deliberate_differences(
    content: str, truth: str, reference: float, ours: float, why: str
) -> None:
    assert r1gui_accuracy(content, truth) == reference
    assert gui_action_reward(content, truth) == ours


def test_gui_r1_malformed_truth_is_an_error_not_a_zero() -> None:
    truth = '{"action": "click", "input_text": ""}'  # no gt_bbox
    assert r1gui_accuracy("<answer>[{'action': 'click', 'point': [1, 2]}]</answer>", truth) == 0.0
    with pytest.raises(ValueError, match="^solution"):
        gui_action_reward("<answer>[{'action': 'click', 'point': [1, 2]}]</answer>", truth)


# --- differential: GUI-G2 on generated cases


def _number(rng: random.Random, value: float) -> str:
    kind = rng.random()
    if kind < 0.5:
        return str(round(value))
    text = f"{value:.{rng.choice([1, 2])}f}"
    return text[1:] if text.startswith("0.") and rng.random() < 0.5 else text  # ".5"


def _g2_case(rng: random.Random) -> tuple[str, list[float], bool]:
    """A completion, GUI-G2's abs_box, and whether the predicted box is proper (x1 <= x2, y1 <= y2)."""
    x, y = rng.uniform(0, 1800), rng.uniform(0, 1000)
    w, h = (
        rng.choice([rng.uniform(2, 40), rng.uniform(20, 400)]),
        rng.choice([rng.uniform(2, 40), rng.uniform(10, 200)]),
    )
    gt = [round(c, rng.choice([0, 1])) for c in (x, y, x + w, y + h)]
    gt[2], gt[3] = max(gt[2], gt[0] + 1), max(gt[3], gt[1] + 1)
    kind = rng.random()
    if kind < 0.6:  # around the target, jittered by up to a few of its sizes
        scale = rng.choice([0.05, 0.3, 1.0, 3.0])
        pred = [c + rng.uniform(-scale, scale) * s for c, s in zip(gt, (w, h, w, h), strict=True)]
    elif kind < 0.8:  # anywhere
        px, py = rng.uniform(0, 1900), rng.uniform(0, 1100)
        pred = [px, py, px + rng.uniform(1, 500), py + rng.uniform(1, 300)]
    else:  # the target itself, or shrunk / grown about its centre
        cx, cy, f = (gt[0] + gt[2]) / 2, (gt[1] + gt[3]) / 2, rng.choice([1.0, 0.5, 2.0])
        pred = [cx - f * w / 2, cy - f * h / 2, cx + f * w / 2, cy + f * h / 2]
    text = "[" + ", ".join(_number(rng, max(c, 0.0)) for c in pred) + "]"
    numbers = [float(n) for n in re.findall(r"\d*\.?\d+", text)]
    proper = numbers[0] < numbers[2] and numbers[1] < numbers[3]
    wrap = rng.choice(
        [
            "{}",
            "<answer>{}</answer>",
            "<think>Find it.</think><answer>{}</answer>",
            "The element is at {}.",
        ]
    )
    return wrap.format(text), gt, proper


@pytest.mark.parametrize("form", ["point", "plane"])
def test_gui_g2_differential(form: str) -> None:
    rng = random.Random(2 if form == "point" else 3)
    checked, spread = 0, []
    for _ in range(600):
        content, gt, proper = _g2_case(rng)
        if not proper:  # inverted or without area: a deliberate difference, below
            continue
        expected = g2_reward(content, gt, form)
        assert gui_point_reward(content, gt, form=form) == pytest.approx(
            expected, abs=G2_ROUNDING
        ), (content, gt)
        checked += 1
        spread.append(expected)
    assert checked > 400
    assert sum(v == 1.0 for v in spread) > 20 and sum(0.05 < v < 0.95 for v in spread) > 80
    assert sum(v == 0.0 for v in spread) > 20


G2 = [0.0, 0.0, 100.0, 40.0]
TINY = [0.0, 0.0, 2.0, 2.0]
GUI_G2_DIFFERENCES = [
    # (completion, target, form, GUI-G2, ours, why)
    (
        "[100, 40, 0, 0]",
        G2,
        "point",
        1.0,
        0.0,
        "an inverted box scores 0.0, as every box reward here",
    ),
    (
        "[2, 2, 0, 0]",
        TINY,
        "plane",
        1.0,
        0.0,
        "an inverted box scores 0.0 (GUI-G2 squares the signs away)",
    ),
    (
        "[1, 1, 1, 1]",
        TINY,
        "plane",
        0.02,
        0.0,
        "a box without area: the limit 0.0 (GUI-G2's eps leaves a residue)",
    ),
    ("(50, 20)", G2, "point", 0.0, 1.0, "a point answer: GUI-G2 reads only boxes"),
    (
        "<think>[0, 0, 1, 1]</think><answer>[0, 0, 100, 40]</answer>",
        G2,
        "point",
        0.381,
        1.0,
        "the answer span, not the first box anywhere",
    ),
    (
        "[3, 0, 103, 40]",
        G2,
        "point",
        0.998,
        pytest.approx(0.998202, abs=1e-6),
        "no rounding to 3 decimals",
    ),
]


@pytest.mark.parametrize(
    ("content", "target", "form", "reference", "ours", "why"),
    GUI_G2_DIFFERENCES,
    ids=[d[5] for d in GUI_G2_DIFFERENCES],
)
def test_gui_g2_deliberate_differences(
    content: str, target: list[float], form: str, reference: float, ours: Any, why: str
) -> None:
    with np.errstate(all="ignore"):
        assert g2_reward(content, target, form) == reference
    assert gui_point_reward(content, target, form=form) == ours


def test_gui_g2_malformed_truth_is_an_error_not_a_zero() -> None:
    assert (
        g2_reward("[0, 0, 10, 10]", [5, 5, 5, 9], "point") == 0.0
    )  # zero width: ZeroDivisionError
    with pytest.raises(ValueError, match="^solution"):
        gui_point_reward("[0, 0, 10, 10]", [5, 5, 5, 9])


def test_text_f1_matches_gui_r1() -> None:
    rng = random.Random(5)
    for _ in range(300):
        a = " ".join(rng.choices(WORDS + ["Mall", "PARIS", "[x]", ""], k=rng.randint(0, 4)))
        b = " ".join(rng.choices(WORDS + ["Mall", "PARIS", "[x]", ""], k=rng.randint(0, 4)))
        assert text_f1(a, b, substring_match=True) == pytest.approx(r1gui_f1(a, b))


# --- components (skyrl_rewards.rewards.gui.gui.GuiAction / GuiPoint)


def test_components_score_rows_and_keys(image_640x480: str) -> None:
    from skyrl_rewards.rewards.registry import build_component

    action = build_component("gui_action", {"box_format": "qwen3_vl", "radius_px": 50})
    point = build_component("gui_point", {"form": "plane", "box_format": "qwen3_vl"})
    row = {
        "completion": "<answer>click(500, 500)</answer>",
        "solution": '{"action": "click", "bbox": [315, 235, 325, 245]}',
        "image_path": image_640x480,
    }
    assert action.score(row).value == 1.0
    assert action.work_key(row) == action.work_key(dict(row))
    assert action.work_key(row) != action.work_key({**row, "completion": "click(1, 1)"})
    # a row that needs no position needs no image, whatever the format
    assert (
        action.score({"completion": "press_back()", "solution": '{"action": "press_back"}'}).value
        == 1.0
    )
    missing = action.score({"completion": "click(5, 5)", "solution": row["solution"]})
    assert missing.status is Status.ERROR and "image_path" in missing.error
    box_row = {**row, "completion": "[250, 250, 750, 750]", "solution": "[160, 120, 480, 360]"}
    assert point.score(box_row).value == pytest.approx(1.0)
    assert point.score({**box_row, "solution": [160, 120, 480, 360]}).value == pytest.approx(1.0)
    assert point.score({**box_row, "solution": "[1, 2]"}).status is Status.ERROR
    for component in (action, point):
        clone = pickle.loads(pickle.dumps(component))
        assert clone.score(row) == component.score(row)
    with pytest.raises(ValueError, match="rewards.gui_action"):
        build_component("gui_action", {"radius_px": -1})
    with pytest.raises(ValueError, match="form"):
        build_component("gui_point", {"form": "cube"})
