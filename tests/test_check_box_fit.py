"""``skyrl-rewards check``: rows whose boxes or grids do not fit the declared box format."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from PIL import Image

from skyrl_rewards import iou_reward
from skyrl_rewards.cli.main import main
from skyrl_rewards.data.check import check_rows
from skyrl_rewards.rewards.geometry.box_formats import BoxFormatChoice
from skyrl_rewards.rewards.mix import RewardMix

REC = RewardMix.from_config({"iou": {"box_format": "original"}, "format_rec": {}})


@pytest.fixture
def big_image(tmp_path: Path) -> str:
    """A 4000x3000 photo-sized PNG."""
    Image.new("L", (4000, 3000)).save(tmp_path / "big.png")
    return "big.png"


def row(image: str, truth: list[int], completion_box: list[float] | None, **columns) -> dict:
    out = {"image_path": image, "solution": f"<answer>{truth}</answer>", **columns}
    if completion_box is not None:
        out["completion"] = f'<think>here</think><answer>{{"bbox_2d": {completion_box}}}</answer>'
    return out


@pytest.mark.parametrize(
    ("the_row", "expected"),
    [
        # a Qwen3-VL answer on the 0-1000 grid, declared original: the case
        (
            row("big.png", [1000, 750, 3000, 2250], [250, 250, 750, 750]),
            [
                "box_format: the completion's box [250, 250, 750, 750] read as original overlaps "
                "the ground truth at IoU 0.00; it fits relative_1000 (qwen2_vl, qwen3_vl) (IoU 1.00): "
                "set box_format"
            ],
        ),
        # the same row naming its own format fits
        (row("big.png", [1000, 750, 3000, 2250], [250, 250, 750, 750], box_format="qwen3_vl"), []),
        # a ground truth written on the 0-1000 grid of a small image lies outside it
        (
            row("small.png", [100, 100, 900, 900], None),
            [
                "solution: ground-truth box [100, 100, 900, 900] lies outside the 300x200 image "
                "(ground truths are in original-image pixels)"
            ],
        ),
        # original pixels declared as the 0-1000 grid: read so, the box lands outside the image
        (
            row("big.png", [1000, 750, 3000, 2250], [1000, 750, 3000, 2250], box_format="qwen2_vl"),
            [
                "box_format: the completion's box [1000, 750, 3000, 2250] read as qwen2_vl lies "
                "outside the 4000x3000 image; it fits original (IoU 1.00): set box_format"
            ],
        ),
        # a grid no resize settings give for the image: the reward's own dataset error
        (
            row(
                "big.png",
                [1000, 750, 3000, 2250],
                [1000, 750, 3000, 2250],
                box_format="qwen2_5_vl",
                image_grid_thw=[1, 20, 30],
            ),
            [
                "iou: error: image_grid_thw: the row's grid [1, 20, 30] is not a resize of its "
                "4000x3000 image"
            ],
        ),
    ],
)
def test_rows_that_do_not_fit_their_format(
    the_row: dict, expected: list[str], tmp_path: Path, big_image: str
) -> None:
    Image.new("L", (300, 200)).save(tmp_path / "small.png")
    problems = [str(p) for p in check_rows([the_row], tmp_path, REC)]
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(f"line 1: {start}"), problem


def test_check_command_exits_1_and_names_the_fitting_format(
    tmp_path: Path, big_image: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        row(big_image, [1000, 750, 3000, 2250], [1000, 750, 3000, 2250]),  # fits original
        row(big_image, [1000, 750, 3000, 2250], [250, 250, 750, 750]),  # 0-1000
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = tmp_path / "rec.yaml"
    config.write_text("rewards:\n  iou: {box_format: original}\n  format_rec: {}\n")
    assert main(["check", "--config", str(config), "--input", str(data)]) == 1
    out = capsys.readouterr().out
    assert "line 2: box_format: the completion's box [250, 250, 750, 750] read as original" in out
    assert "line 1:" not in out
    assert (
        main(
            [
                "check",
                "--config",
                str(config),
                "--input",
                str(data),
                "rewards.iou.box_format=qwen3_vl",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out  # now the first row is the one that does not fit
    assert "line 1: box_format" in out and "line 2:" not in out


@pytest.mark.parametrize("size", [(4000, 4000), (4000, 3000)])
def test_rows_from_an_engine_with_other_bounds_get_the_bounds_hint(
    size: tuple[int, int], tmp_path: Path
) -> None:
    """Rows answered at an engine's max_pixels 1,003,520, checked at the reward's default bounds.

    On the square image the 980x980 input is close enough to the 0-1000 grid that
    relative_1000 fits by coincidence (IoU 0.96): the hint must name the bounds instead. On
    the 4:3 one nothing else fits, and the row is still reported.
    """
    Image.new("L", size).save(tmp_path / "photo.png")
    width, height = size
    engine = BoxFormatChoice.build("qwen2_5_vl", max_pixels=1_003_520).default
    input_w, input_h = engine.resized(width, height)
    truth = [width // 4, height // 4, 3 * width // 4, height // 2]
    answer = [round(truth[0] * input_w / width), round(truth[1] * input_h / height)]
    answer += [round(truth[2] * input_w / width), round(truth[3] * input_h / height)]
    the_row = row("photo.png", truth, answer)
    at_default = RewardMix.from_config({"iou": {}, "format_rec": {}})
    problems = [str(p) for p in check_rows([the_row], tmp_path, at_default)]
    assert len(problems) == 1, problems
    assert f"it fits qwen2_5_vl at a {input_w}x{input_h} input (IoU" in problems[0]
    assert "max_pixels 12845056: give the reward the engine's min_pixels/max_pixels" in problems[0]
    assert "relative_1000" not in problems[0]
    at_engine = RewardMix.from_config({"iou": {"max_pixels": 1_003_520}, "format_rec": {}})
    assert check_rows([the_row], tmp_path, at_engine) == []


ENGINE_MAX_PIXELS = 1_003_520


def random_truth(rng: random.Random, width: int, height: int, least: int) -> list[int]:
    """A box of at least ``least`` pixels a side inside a ``width`` x ``height`` image."""
    x1, y1 = rng.randint(0, width - least), rng.randint(0, height - least)
    return [x1, y1, rng.randint(x1 + least, width), rng.randint(y1 + least, height)]


def test_every_row_answered_at_an_engines_bounds_gets_the_bounds_hint() -> None:
    """Random photos past the engine's max_pixels, each answered in whole pixels of the engine's input.

    Checked at the reward's default bounds, every row that scores under 0.9 there is reported
    with the engine's input size, a middling overlap (0.5 to 0.9, a moderate shrink) and a
    thin box (whose short side says little about the scale) included; at the engine's bounds
    none is. Rows whose answer scores under 0.9 even at the engine's bounds (a box a few input
    pixels thin, rounded) are left out: nothing fits them.
    """
    rng = random.Random(42)
    engine = BoxFormatChoice.build("qwen2_5_vl", max_pixels=ENGINE_MAX_PIXELS).default
    at_default = RewardMix.from_config({"iou": {}, "format_rec": {}})
    at_engine = RewardMix.from_config({"iou": {"max_pixels": ENGINE_MAX_PIXELS}, "format_rec": {}})
    middling = thin = 0
    for _ in range(300):
        width = rng.randint(900, 4500)
        area = rng.choice([rng.uniform(1.15, 2), rng.uniform(2, 16)]) * ENGINE_MAX_PIXELS
        height = round(area / width)
        image = Image.new("L", (width, height))
        truth = random_truth(rng, width, height, least=rng.choice([10, 30, 200]))
        input_w, input_h = engine.resized(width, height)
        scales = [input_w / width, input_h / height] * 2
        answer = [round(v * s) for v, s in zip(truth, scales, strict=True)]
        the_row = {**row("", truth, answer), "image_path": None, "image": image}
        completion, solution = [the_row["completion"]], [the_row["solution"]]
        if iou_reward(completion, solution, image=[image], max_pixels=ENGINE_MAX_PIXELS)[0] < 0.9:
            continue
        assert check_rows([the_row], Path("."), at_engine) == []
        problems = [str(p) for p in check_rows([the_row], Path("."), at_default)]
        score = iou_reward(completion, solution, image=[image])[0]
        if score >= 0.9:
            continue
        assert len(problems) == 1, (width, height, truth, answer, score)
        assert f"it fits qwen2_5_vl at a {input_w}x{input_h} input" in problems[0]
        middling += score >= 0.5
        thin += min(answer[2] - answer[0], answer[3] - answer[1]) < 16
    assert middling >= 5 and thin >= 5  # the cases the hint used to miss


def test_a_sloppy_reference_in_the_right_format_gets_no_bounds_hint() -> None:
    """References drawn loosely (each side off by a few percent of the box) in the declared
    format's own input: a resize under other bounds never 'fits' them by coincidence."""
    rng = random.Random(7)
    at_default = RewardMix.from_config({"iou": {}, "format_rec": {}})
    fmt = BoxFormatChoice.build("qwen2_5_vl").default
    for _ in range(400):
        width, height = rng.randint(100, 4500), rng.randint(100, 4500)
        truth = random_truth(rng, width, height, least=4)
        input_w, input_h = fmt.resized(width, height)
        scales = [input_w / width, input_h / height] * 2
        sides = [truth[2] - truth[0], truth[3] - truth[1]] * 2
        jitter = rng.choice([0.02, 0.05, 0.1, 0.3])
        answer = [
            round((v + rng.gauss(0, jitter * side)) * s)
            for v, side, s in zip(truth, sides, scales, strict=True)
        ]
        if answer[2] <= answer[0] or answer[3] <= answer[1]:
            continue
        the_row = {
            **row("", truth, answer),
            "image_path": None,
            "image": Image.new("L", (width, height)),
        }
        for problem in check_rows([the_row], Path("."), at_default):
            assert "it fits qwen2_5_vl at" not in str(problem), (width, height, truth, answer)
