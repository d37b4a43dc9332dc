"""Boxes against the real processors: native answers, possible grids, refused images, EXIF, clamping."""

from __future__ import annotations

import random
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from oriented_images import BROKEN_EXIF, exif_bytes, save_oriented, save_png_with_late_exif
from PIL import Image
from transformers.image_utils import load_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    smart_resize as transformers_smart_resize,
)

from skyrl_rewards import iou_reward
from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.geometry.box_formats import FAMILIES, grid_is_possible
from skyrl_rewards.rewards.geometry.boxes import image_size, predicted_box
from skyrl_rewards.rewards.text.format_checks import format_reward_rec

# --- native answers

TRUTH = "<answer>[480, 270, 1440, 810]</answer>"  # the middle of a 1920x1080 photo
"""On Qwen2-VL's 0-1000 grid that is (250,250),(750,750)."""


@pytest.fixture
def photo(tmp_path: Path) -> str:
    path = tmp_path / "photo.png"
    Image.new("RGB", (1920, 1080), (10, 20, 30)).save(path)
    return str(path)


NATIVE = {
    # Qwen2-VL's own grounding answer (Qwen2-VL report, arXiv 2409.12191, 2.2)
    "qwen2_vl tokens": "<|object_ref_start|>the cat<|object_ref_end|>"
    "<|box_start|>(250,250),(750,750)<|box_end|>",
    # the same decoded with skip_special_tokens, as a trainer's generator returns it
    "qwen2_vl decoded": "the cat(250,250),(750,750)",
    "qwen2_vl spaced": "the cat ( 250 , 250 ) , ( 750 , 750 )",
    # InternVL2.5's grounding answer
    "internvl": "<ref>the cat</ref><box>[[250, 250, 750, 750]]</box>",
}


@pytest.mark.parametrize("answer", NATIVE.values(), ids=NATIVE.keys())
@pytest.mark.parametrize("reward", ["iou", "giou"])
def test_each_native_answer_of_the_right_box_scores_one(
    answer: str, reward: str, photo: str
) -> None:
    for content in (answer, f"<think>It sits in the middle.</think><answer>{answer}</answer>"):
        scored = make_reward(reward, box_format="qwen2_vl")([content], [TRUTH], image_path=[photo])
        assert scored == [pytest.approx(1.0)], content


def test_the_first_box_wins_whatever_its_form() -> None:
    assert predicted_box("a(1,2),(3,4) then [5, 6, 7, 8]") == (1.0, 2.0, 3.0, 4.0)
    assert predicted_box("[5, 6, 7, 8] then a(1,2),(3,4)") == (5.0, 6.0, 7.0, 8.0)
    assert predicted_box("a point (1, 2) and another (3, 4)") is None  # two points, no pair
    assert predicted_box("(1,2),(3,4,5)") is None


@pytest.mark.parametrize("answer", NATIVE.values(), ids=NATIVE.keys())
def test_format_rec_accepts_each_native_box(answer: str) -> None:
    content = f"<think>It sits in the middle.</think> <answer>{answer}</answer>"
    assert format_reward_rec([content]) == [1.0]
    assert format_reward_rec([f"<answer>{answer}</answer>"]) == [0.0]  # no think block
    assert format_reward_rec(["<think>x</think><answer><ref>the cat</ref></answer>"]) == [0.0]
    assert format_reward_rec([f"<think>x</think><answer>a</answer> {answer}"]) == [0.0]


# --- possible grids, against transformers' own resize


def achievable_grids(height: int, width: int, factor: int) -> set[tuple[int, int]]:
    """Every (h, w) in factors transformers' smart_resize gives under integer bounds.

    max_pixels from 1 to the rounded area (with min_pixels 1), and min_pixels from the
    rounded area to four times it (with max_pixels at least as large).
    """
    area = round(height / factor) * factor * round(width / factor) * factor
    grids = set()
    for max_pixels in range(1, area + 1):
        h, w = transformers_smart_resize(height, width, factor, 1, max_pixels)
        grids.add((h // factor, w // factor))
    for min_pixels in range(area, 4 * area + 1):
        h, w = transformers_smart_resize(height, width, factor, min_pixels, 10**12)
        grids.add((h // factor, w // factor))
    return grids


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl"])
def test_possible_grids_are_exactly_those_some_bounds_give(family: str) -> None:
    """Every grid small enough to be reached by the bounds enumerated, for 12 random images."""
    fmt = FAMILIES[family]
    factor, merge = fmt.factor, fmt.merge_size
    rng = random.Random(family)
    for _ in range(12):
        height, width = rng.randint(20, 260), rng.randint(20, 260)
        reached = achievable_grids(height, width, factor)
        area = round(height / factor) * round(width / factor)
        for a in range(1, 40):
            for b in range(1, 40):
                if a * b > 2 * max(area, 1):
                    continue  # past what min_pixels up to 4x the area surely reaches
                possible = grid_is_possible((a * merge, b * merge), (width, height), fmt)
                assert possible == ((a, b) in reached), (width, height, a, b)


def test_a_grid_some_engine_produced_is_used_and_another_is_a_dataset_error(
    tmp_path: Path,
) -> None:
    """A 280x140 image: the real processor at max_pixels 9,800 gives [1, 4, 10] (a 140x56 input)."""
    path = tmp_path / "wide.png"
    Image.new("RGB", (280, 140), (200, 10, 10)).save(path)
    engine = Qwen2VLImageProcessorPil(patch_size=14, merge_size=2, min_pixels=3136, max_pixels=9800)
    grid = engine(images=[Image.open(path)], return_tensors="np")["image_grid_thw"].tolist()
    assert grid == [[1, 4, 10]]
    truth = ["<answer>[56, 35, 224, 105]</answer>"]
    answer = ["<answer>[28, 14, 112, 42]</answer>"]  # the truth in the 140x56 input
    assert iou_reward(answer, truth, image_path=[str(path)], image_grid_thw=grid) == [1.0]
    # the reward's default bounds give 280x140 (grid 10 x 20): without the grid it reads so
    assert iou_reward(answer, truth, image_path=[str(path)])[0] < 0.3
    for impossible in ([1, 6, 10], [1, 10, 10], [1, 5, 11]):  # no bounds, or not a merge multiple
        assert iou_reward(answer, truth, image_path=[str(path)], image_grid_thw=[impossible]) == [
            None
        ]
    # [1, 5, 10] (a 140x70 input) is this resize on a merge-1 tower: an odd grid no merge-2
    # processor makes, used once the reward is told the merge size
    merge_1 = Qwen2VLImageProcessorPil(patch_size=14, merge_size=1, min_pixels=1, max_pixels=9800)
    odd = merge_1(images=[Image.open(path)], return_tensors="np")["image_grid_thw"].tolist()
    assert odd == [[1, 5, 10]]
    on_70 = ["<answer>[28, 17.5, 112, 52.5]</answer>"]  # the truth in the 140x70 input
    assert iou_reward(on_70, truth, image_path=[str(path)], image_grid_thw=odd) == [None]
    scored = iou_reward(on_70, truth, image_path=[str(path)], image_grid_thw=odd, merge_size=1)
    assert scored == [1.0]


# --- an image the processors refuse


@pytest.mark.parametrize(
    ("reward", "solution", "answers"),
    [
        ("iou", "<answer>[1, 0, 100, 1]</answer>", ["[1, 0, 100, 1]", "no box here"]),
        ("giou", "<answer>[1, 0, 100, 1]</answer>", ["[1, 0, 100, 1]", "no box here"]),
        (
            "boxes_matched",
            '<answer>[{"bbox_2d": [1, 0, 100, 1], "label": "line"}]</answer>',
            ['[{"bbox_2d": [1, 0, 100, 1], "label": "line"}]', "nothing"],
        ),
        (
            "gui_action",
            '{"action": "click", "bbox": [1, 0, 100, 1]}',
            ["click(50, 0)", 'type("x")', "nothing"],
        ),
        # no position to convert at all: the image is still one the policy never saw
        ("gui_action", '{"action": "type", "text": "x"}', ['type("x")', "click(50, 0)", "nothing"]),
        ("gui_point", "[1, 0, 100, 1]", ["[1, 0, 100, 1]", "none"]),
    ],
)
@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl"])
def test_an_image_the_processor_refuses_is_a_dataset_error_for_every_answer(
    reward: str, solution: str, answers: list[str], family: str, tmp_path: Path
) -> None:
    path = tmp_path / "strip.png"
    Image.new("RGB", (402, 2)).save(path)  # aspect 201: transformers and vLLM refuse it
    with pytest.raises(ValueError, match="aspect ratio"):
        Qwen2VLImageProcessorPil()(images=[Image.open(path)], return_tensors="np")
    scored = make_reward(reward, box_format=family)(
        answers, [solution] * len(answers), image_path=[str(path)] * len(answers)
    )
    assert scored == [None] * len(answers)
    with pytest.raises(
        ValueError, match=r"image_path: the 402x2 image has an aspect ratio past 200"
    ):
        make_reward(reward, box_format=family, on_error="raise")(
            answers[-1:], [solution], image_path=[str(path)]
        )


def test_a_refused_image_is_no_matter_for_formats_without_a_qwen_processor(tmp_path: Path) -> None:
    path = tmp_path / "strip.png"
    Image.new("RGB", (402, 2)).save(path)
    scored = make_reward("giou", box_format="relative_1000")(
        ["no box", "[0, 0, 1000, 1000]"],
        ["<answer>[0, 0, 402, 2]</answer>"] * 2,
        image_path=[str(path)] * 2,
    )
    assert scored == [-1.0, 1.0]


# --- EXIF orientation


@pytest.mark.parametrize("orientation", [1, 2, 3, 4, 5, 6, 7, 8])
@pytest.mark.parametrize("kind", ["JPEG", "PNG", "WEBP", "PNG after IDAT"])
def test_the_size_is_the_one_transformers_loads(
    orientation: int, kind: str, tmp_path: Path
) -> None:
    path = tmp_path / f"photo_{orientation}.{kind.split()[0].lower()}"
    if kind == "PNG after IDAT":  # Pillow finds this eXIf chunk only by decoding the image
        save_png_with_late_exif(path, exif_bytes(orientation))
        assert "exif" not in Image.open(path).info
    else:
        save_oriented(path, kind, orientation)
    loaded = load_image(str(path))  # transformers: ImageOps.exif_transpose, as vLLM's loader
    assert image_size(str(path)) == loaded.size
    assert loaded.size == ((300, 400) if orientation >= 5 else (400, 300))


@pytest.mark.parametrize("late", [False, True], ids=["header", "after IDAT"])
def test_broken_exif_is_no_orientation(late: bool, tmp_path: Path) -> None:
    """vLLM keeps the image as stored when the transpose fails (tests/skyrl_trainer checks it)."""
    path = tmp_path / "broken.png"
    if late:
        save_png_with_late_exif(path, BROKEN_EXIF)
    else:
        Image.new("RGB", (400, 300)).save(path, exif=BROKEN_EXIF)
    with pytest.raises(SyntaxError):
        load_image(str(path))  # transformers does not suppress the failure
    assert image_size(str(path)) == (400, 300)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS as Linux applies it")
def test_an_exif_chunk_claiming_gigabytes_is_not_read(tmp_path: Path) -> None:
    """A 100-byte PNG whose late ``eXIf`` chunk claims 4 GiB: the length is the file's word,
    so it is not read (a read of that length allocated it first: ``MemoryError`` under a
    2 GiB address-space limit); no orientation, as for other broken EXIF."""
    path = tmp_path / "claims.png"
    save_png_with_late_exif(path, BROKEN_EXIF, size=(40, 20))
    data = path.read_bytes()
    start = data.rindex(b"eXIf") - 4
    path.write_bytes(data[:start] + struct.pack(">I", 0xFFFF_FFF0) + data[start + 4 :])
    script = (
        "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
        "from skyrl_rewards.rewards.geometry.boxes import image_size; "
        "print(image_size(sys.argv[1]))"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(path)], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "(40, 20)"


def test_a_box_on_the_turned_photo_scores_one(tmp_path: Path) -> None:
    path = tmp_path / "portrait.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # stored landscape 400x300, shown portrait 300x400
    Image.new("RGB", (400, 300)).save(path, exif=exif.tobytes())
    truth = ["<answer>[30, 40, 150, 200]</answer>"]  # on the 300x400 image the policy saw
    answer = ["<answer>[100, 100, 500, 500]</answer>"]
    assert iou_reward(answer, truth, image_path=[str(path)], box_format="qwen2_vl") == [1.0]


# --- relative coordinates past the grid (Qwen3-VL's 0-999 grid, QwenLM/Qwen3-VL#1741)


def test_relative_coordinates_are_clamped_to_the_grid(photo: str) -> None:
    full = "<answer>[0, 0, 1920, 1080]</answer>"
    reward = make_reward("giou", box_format="qwen3_vl")
    past = reward(["[-4, 0, 1004, 1000]", "[0, 0, 999, 999]"], [full, full], image_path=[photo] * 2)
    assert past[0] == 1.0 and past[1] > 0.99


def test_a_gui_action_row_without_a_position_reads_its_image(tmp_path: Path) -> None:
    """A type target converts nothing, yet its row's image is read: a missing one is named."""
    reward = make_reward("gui_action", on_error="raise")
    solution = ['{"action": "type", "text": "x"}']
    path = tmp_path / "screen.png"
    Image.new("RGB", (400, 300)).save(path)
    assert reward(['type("x")'], solution, image_path=[str(path)]) == [1.0]
    assert reward(['type("x")'], solution) == [1.0]  # no image at all: nothing to read
    with pytest.raises(ValueError, match="image_path: cannot read image"):
        reward(['type("x")'], solution, image_path=[str(tmp_path / "missing.png")])
    relative = make_reward("gui_action", box_format="relative_1000", on_error="raise")
    assert relative(['type("x")'], solution, image_path=[str(tmp_path / "missing.png")]) == [1.0]
