"""An adversarial set of model outputs: nothing a model wrote makes a reward raise.

Each input goes through every reward (per-sample and batch forms). A bad
*dataset* row, by contrast, raises ``ValueError`` naming the field and index.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from PIL import Image

from skyrl_rewards import (
    cosine_reward,
    default_accuracy_reward,
    detection_score,
    format_reward,
    format_reward_rec,
    iou_reward,
    make_reward,
    repetition_reward,
)
from skyrl_rewards.rewards.text.shaping import WordTokenizer

BIG = 10_000_000


def _nested(depth: int, open_: str, close: str) -> str:
    return open_ * depth + close * depth


ADVERSARIAL: list[object] = [
    "", " ", "\n", "\x00", None, b"", b"<answer>1</answer>", b"\xff\xfe", 0, 1.5, float("nan"), [], {},
    [{}], [{"role": "assistant"}], [{"content": None}], [{"content": 123}], {"content": "<answer>1</answer>"},
    "x" * BIG,  # 10 MB string
    "<answer>" + "9" * BIG + "</answer>",  # 10 MB of digits
    "<answer>" * 100_000, "</answer>" * 100_000, "<answer>" * 50_000 + "</answer>" * 50_000,
    "<think>" * 1000 + "</think>" * 1000 + "<answer>x</answer>",
    "<think>a</think><answer>b</answer>" * 5000,
    "<think><answer></think></answer>", "<answer><think></answer></think>",
    "<answer>" + _nested(10_000, "[", "]") + "</answer>",  # deeply nested JSON
    "```json" + _nested(100_000, "[", "]") + "```",
    "```json" + _nested(5_000, "{\"a\":", "}") + "```",
    "```json [" + "1," * 100_000 + "```",  # unterminated huge list
    "```json \"" + "a" * 1_000_000 + "```",  # 1 MB unterminated string
    "```json [NaN, Infinity, -Infinity]```",
    '```json [{"bbox_2d": [NaN, 0, 1, 1], "label": "a"}]```',
    '```json [{"bbox_2d": [1e400, 0, 1, 1], "label": "a"}]```',
    '```json [{"bbox_2d": [-10, -10, -20, -20], "label": "a"}]```',  # inverted negative box
    '```json [{"bbox_2d": [5, 5, 1, 1], "label": "a"}]```',  # inverted box
    '```json [{"bbox_2d": [1, 1, 1, 1], "label": "a"}]```',  # zero-area box
    '```json [{"bbox_2d": "oops", "label": ["x"]}]```',
    '```json [{"bbox_2d": [1, 2, 3, 4], "label": null}]```',
    '```json [{"bbox_2d": [1, 2, 3, 4]}]```',  # missing label
    '```json [1, 2, 3]```', '```json ["a", "b"]```', '```json [[1, 2, 3, 4]]```', '```json [null]```',
    '```json {"bbox_2d": [1, 2, 3, 4], "label": "a"}```',
    '```json [{"bbox_2d": [true, false, 1, 2], "label": "a"}]```',
    '[{"bbox_2d": [1, 2, 3, 4], "label": "a"}' * 10_000,
    "<answer>[NaN, 1, 2, 3]</answer>", "<answer>[1e999, 1, 2, 3]</answer>",
    "<answer>[" + "9" * 400 + ", 1, 2, 3]</answer>",  # float overflow to inf
    "<answer>[-1, -1, -1, -1]</answer>", "<answer>[10, 10, 0, 0]</answer>", "<answer>[0, 0, 0, 0]</answer>",
    "<answer>[1, 2, 3, 4" + ", 5" * 100_000 + "]</answer>",
    "<answer>" + "[1, 2, 3]" * 100_000 + "</answer>",
    "<answer>$9^{9^{9^{9}}}$</answer>", "<answer>$(10^{100})!$</answer>", "<answer>$10^{10^{10}}$</answer>",
    "<answer>$" + "\\frac{1}{" * 10_000 + "1" + "}" * 10_000 + "$</answer>",
    "<answer>$" + "(" * 5000 + "1" + ")" * 5000 + "$</answer>",
    "<answer>\\boxed{" * 2000 + "}" * 2000 + "</answer>",
    "<answer>$\\sqrt{" * 500 + "2" + "}" * 500 + "$</answer>",
    "<answer>$\\int_0^\\infty e^{-x^2} dx$</answer>",
    "<answer>\\begin{pmatrix}" + "1 & " * 1000 + "\\end{pmatrix}</answer>",
    "<answer>$1/0$</answer>", "<answer>$0/0$</answer>", "<answer>$\\infty - \\infty$</answer>",
    "<answer>nan</answer>", "<answer>inf</answer>", "<answer>-inf</answer>", "<answer>1_000</answer>",
    "<answer>" + "A. " * 100_000 + "</answer>",
    "<answer>" + "答案是A。" * 10_000 + "</answer>",
    "A" * BIG,
    "\u202e\u202d<answer>\u200b1\u200b</answer>",  # bidi overrides, zero-width spaces
    "<answer>\U0001F600\U0001F4A9</answer>", "<answer>\ud800</answer>",  # emoji, lone surrogate
    "<answer>Ａ．</answer>",  # full-width letter
    "<answer>ǅ</answer>", "\r\r\r\n\n\n" * 100_000, "\t" * BIG,
    "word " * 2_000_000,  # 10 MB of words
    " ".join(str(i) for i in range(1_000_000)),  # many distinct words
    "<think>" + "a b c d e f " * 100_000 + "</think><answer>x</answer>",
    "```" * 100_000, "```json" * 50_000, "`" * BIG,
    "<answer>{" * 100_000 + "[1, 2, 3, 4]" + "}" * 100_000 + "</answer>",
    "<think>x</think><answer>{" + "[1,2,3,4]" * 100_000 + "}</answer>",
    "<think>" + "</think>\n<answer>" * 100_000,
    "<think>x</think><answer>" + "{ " * 100_000,
    "yes no " * 100_000, "<answer>yesno</answer>", "<answer>no yes</answer>",
    "\\" * BIG, "$" * 100_000, "{" * BIG, "}" * BIG,
    "<answer>$" + "x+" * 100_000 + "1$</answer>",
    "<answer>" + "1." * 1000 + "</answer>",
    "<answer>...</answer>", "<answer>.</answer>", "<answer>\n</answer>",
    "<answer>" + "\\\\" * 1000 + "</answer>",
    "<answer>$\\frac{}{}$</answer>", "<answer>$^^^^$</answer>", "<answer>$_{_{_{}}}$</answer>",
    "<answer>\\left(\\right.</answer>", "<answer>$\\begin{cases}$</answer>",
    "<answer>0x1F</answer>", "<answer>1e-9999</answer>", "<answer>-0</answer>",
    "<answer>" + "9" * 5000 + "</answer>",
    "\x1b[31mred\x1b[0m <answer>2</answer>",
    "<answer>" + "é" * 500_000 + "</answer>",
    "<ANSWER>1</ANSWER>", "<answer >1</answer >", "< answer>1</ answer>",
]  # fmt: skip

SOLUTIONS = {
    "accuracy": "<answer>2</answer>",
    "iou": "<answer>[10, 20, 110, 220]</answer>",
    "detection": '<answer>```json [{"bbox_2d": [10, 20, 110, 220], "label": "cat"}]```</answer>',
}


def test_the_set_is_large() -> None:
    assert len(ADVERSARIAL) >= 100


@pytest.fixture(scope="module")
def image(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("img") / "img.png"
    Image.new("RGB", (448, 448)).save(path)
    return str(path)


def _finite_in(value: float, low: float, high: float) -> bool:
    return isinstance(value, float) and math.isfinite(value) and low <= value <= high


@pytest.mark.slow
@pytest.mark.parametrize("content", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_no_reward_raises_for_model_output(content: object, image: str) -> None:
    completions = [content]
    assert _finite_in(
        default_accuracy_reward(content, SOLUTIONS["accuracy"], math_timeout_s=2), 0.0, 1.0
    )  # type: ignore[arg-type]
    (iou_value,) = iou_reward(
        completions, [SOLUTIONS["iou"]], image_grid_thw=[[1, 32, 32]], image_path=[image]
    )
    assert _finite_in(iou_value, 0.0, 1.0)
    assert _finite_in(detection_score(content, SOLUTIONS["detection"]), 0.0, 1.0)  # type: ignore[arg-type]
    assert _finite_in(repetition_reward(content), -1.0, 0.0)  # type: ignore[arg-type]
    assert _finite_in(cosine_reward(content, WordTokenizer(), 1.0), 0.5, 1.0)  # type: ignore[arg-type]
    assert format_reward(completions)[0] in (0.0, 1.0)
    assert format_reward_rec(completions)[0] in (0.0, 1.0)
    for name in ("accuracy", "detection"):
        (value,) = make_reward(name)(completions, solution=[SOLUTIONS[name]])
        assert _finite_in(value, 0.0, 1.0)


@pytest.mark.parametrize(
    ("reward", "solution", "columns", "field"),
    [
        ("accuracy", None, {}, "solution"),  # missing ground truth
        ("accuracy", "<answer> </answer>", {}, "solution"),  # empty ground truth
        ("accuracy", 12, {}, "solution"),  # not a string
        ("iou", "<answer>[1, 2, 3]</answer>", {}, "solution"),
        ("iou", "<answer>[1, 2, 3, 4]</answer>", {"image_grid_thw": "bad"}, "image_grid_thw"),
        (
            "iou",
            "<answer>[1, 2, 3, 4]</answer>",
            {"image_grid_thw": [1, 2, 2], "image_path": "/no/such.png"},
            "image_path",
        ),
        ("detection", "<answer>not json</answer>", {}, "solution"),
        ("accuracy", "<answer>1</answer>", {"accu_reward_method": "nope"}, "accu_reward_method"),
    ],
)
def test_dataset_errors_raise_value_error_with_field_and_index(
    reward: str, solution: object, columns: dict, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch form masks bad rows by default; this test checks the error it raises on request.
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    batch = {key: ["ok-row-placeholder", value] for key, value in columns.items()}
    good = {"image_grid_thw": [1, 2, 2], "image_path": None, "accu_reward_method": "default"}
    for key in batch:
        batch[key][0] = good[key]
    if "image_grid_thw" in batch and "image_path" not in batch:
        batch["image_path"] = [None, None]
    first_solution = (
        "<answer>[1, 2, 3, 4]</answer>" if reward != "detection" else SOLUTIONS["detection"]
    )
    if reward == "iou" and batch:
        batch["image_grid_thw"][0] = None  # row 0 compares unscaled boxes
    with pytest.raises(ValueError, match=rf"sample 1: {field}"):
        make_reward(reward)(
            ["<answer>[1, 2, 3, 4]</answer>"] * 2, solution=[first_solution, solution], **batch
        )


def test_decompression_bomb_header_is_a_dataset_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch form masks bad rows by default; this test checks the error it raises on request.
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    bomb = tmp_path / "bomb.png"
    Image.new("1", (Image.MAX_IMAGE_PIXELS or 89_478_485, 3)).save(
        bomb
    )  # a small file claiming ~270 Mpx
    with pytest.raises(ValueError, match="sample 0: image_path"):
        iou_reward(
            ["<answer>[1, 2, 3, 4]</answer>"],
            ["<answer>[1, 2, 3, 4]</answer>"],
            image_grid_thw=[[1, 2, 2]],
            image_path=[str(bomb)],
        )
