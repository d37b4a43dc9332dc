"""Box formats by model family: the resize against transformers' own, conversions, rows, rewards."""

from __future__ import annotations

import pickle
import random
from pathlib import Path

import pytest
from PIL import Image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    Qwen2VLImageProcessorPil,
)
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
    smart_resize as transformers_smart_resize,
)

from skyrl_rewards import iou_reward
from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.geometry.box_formats import (
    FAMILIES,
    BoxFormatChoice,
    row_converter,
    smart_resize,
)
from skyrl_rewards.rewards.registry import build_component

# The processors' published settings (preprocessor_config.json of Qwen2.5-VL-7B-Instruct and
# Qwen3-VL-8B-Instruct); transformers maps qwen3_vl to the same Qwen2VLImageProcessor class.
QWEN2_5_VL_PROCESSOR = {
    "patch_size": 14,
    "merge_size": 2,
    "min_pixels": 3136,
    "max_pixels": 12845056,
}
QWEN3_VL_PROCESSOR = {
    "patch_size": 16,
    "merge_size": 2,
    "min_pixels": 65536,
    "max_pixels": 16777216,
}


def random_sizes(n: int, seed: int) -> list[tuple[int, int]]:
    """``(height, width)`` pairs: ordinary photos, tiny, huge and extreme aspect ratios (to 200:1)."""
    rng = random.Random(seed)
    sizes = []
    for i in range(n):
        kind = i % 4
        if kind == 0:  # ordinary
            h, w = rng.randint(100, 2000), rng.randint(100, 2000)
        elif kind == 1:  # tiny: below one patch, below min_pixels
            h, w = rng.randint(1, 60), rng.randint(1, 60)
        elif kind == 2:  # huge: past max_pixels
            h, w = rng.randint(3000, 40000), rng.randint(3000, 40000)
        else:  # extreme aspect ratios, up to the processors' limit of 200
            short = rng.randint(1, 400)
            long = min(short * 200, int(short * rng.uniform(5, 200)))
            h, w = (short, long) if rng.random() < 0.5 else (long, short)
        sizes.append((h, w))
    return sizes


@pytest.mark.parametrize(
    ("factor", "min_pixels", "max_pixels"),
    [
        (28, 3136, 12845056),  # Qwen2-VL / Qwen2.5-VL defaults
        (28, 256 * 28 * 28, 1280 * 28 * 28),  # the bounds Qwen's cookbooks pass
        (28, 3136, 401408),  # a small max_pixels, as RL runs set to save memory
        (32, 65536, 16777216),  # Qwen3-VL defaults
        (32, 1024, 262144),
    ],
)
def test_smart_resize_equals_transformers_on_1200_random_sizes(
    factor: int, min_pixels: int, max_pixels: int
) -> None:
    for height, width in random_sizes(1200, seed=factor + max_pixels):
        ours = smart_resize(height, width, factor, min_pixels, max_pixels)
        assert ours == transformers_smart_resize(height, width, factor, min_pixels, max_pixels), (
            height,
            width,
        )
        assert ours[0] % factor == 0 and ours[1] % factor == 0


@pytest.mark.parametrize("size", [(1, 201), (10_000, 49)])
def test_an_aspect_ratio_the_processor_refuses_is_refused(size: tuple[int, int]) -> None:
    with pytest.raises(ValueError, match="aspect ratio"):
        transformers_smart_resize(*size)
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(*size)


@pytest.mark.parametrize(
    ("family", "processor"),
    [("qwen2_5_vl", QWEN2_5_VL_PROCESSOR), ("qwen3_vl", QWEN3_VL_PROCESSOR)],
)
def test_grids_equal_the_real_image_processor(family: str, processor: dict) -> None:
    """The processor run on real images (small ones: tiny, odd, wide) and its patch count on any size."""
    image_processor = Qwen2VLImageProcessorPil(**processor)
    fmt = FAMILIES[family]
    for height, width in random_sizes(1000, seed=7):
        t, h, w = fmt.grid(width, height)
        assert image_processor.get_number_of_image_patches(height, width, {}) == t * h * w
    for height, width in [(1, 1), (13, 500), (240, 320), (600, 7), (255, 257), (48, 9000)]:
        image = Image.new("RGB", (width, height), (120, 30, 200))
        out = image_processor(images=[image], return_tensors="np")
        assert out["image_grid_thw"].tolist() == [list(fmt.grid(width, height))], (width, height)


# Each family's convention on one 1920x1080 photo and its documented coordinate ranges:
# Qwen2.5-VL answers in pixels of its 1932x1092 input (smart_resize), Qwen2-VL and Qwen3-VL
# (and InternVL2.5) on a 0-1000 grid, relative_1 in fractions, original as written.
@pytest.mark.parametrize(
    ("family", "model_box", "original_box"),
    [
        ("qwen2_5_vl", (966, 546, 1932, 1092), (960, 540, 1920, 1080)),  # centre to corner
        ("resized_pixels", (0, 0, 483, 273), (0, 0, 480, 270)),
        ("qwen2_vl", (500, 500, 1000, 1000), (960, 540, 1920, 1080)),
        ("qwen3_vl", (250, 0, 750, 1000), (480, 0, 1440, 1080)),
        ("relative_1000", (0, 0, 1000, 1000), (0, 0, 1920, 1080)),
        ("relative_1", (0.25, 0.5, 0.75, 1.0), (480, 540, 1440, 1080)),
        ("original", (12, 34, 56, 78), (12, 34, 56, 78)),
    ],
)
def test_each_family_converts_to_original_pixels(
    family: str, model_box: tuple, original_box: tuple
) -> None:
    assert FAMILIES["qwen2_5_vl"].resized(1920, 1080) == (1932, 1092)
    converted = FAMILIES[family].to_original(model_box, (1920, 1080))
    assert converted == pytest.approx(original_box)


@pytest.fixture
def photo(tmp_path: Path) -> str:
    """A real 1920x1080 PNG (only its header is read by the rewards)."""
    path = tmp_path / "photo.png"
    Image.new("RGB", (1920, 1080), (10, 20, 30)).save(path)
    return str(path)


TRUTH = "<answer>[480, 270, 1440, 810]</answer>"  # the middle of the 1920x1080 photo


def test_a_qwen3_vl_answer_of_the_right_box_scores_one(photo: str) -> None:
    answer = "<think>It is in the middle.</think><answer>[250, 250, 750, 750]</answer>"
    assert iou_reward([answer], [TRUTH], image_path=[photo], box_format="qwen3_vl") == [1.0]
    # the same answer read as Qwen2.5-VL's pixels (the default before this module) is wrong
    assert iou_reward([answer], [TRUTH], image_path=[photo])[0] < 0.25


def test_a_qwen2_5_vl_answer_scores_one_through_the_processors_grid(photo: str) -> None:
    """The grid comes from transformers' processor on the real image; the reward computes the same."""
    processor = Qwen2VLImageProcessorPil(**QWEN2_5_VL_PROCESSOR)
    grid = processor(images=[Image.open(photo)], return_tensors="np")["image_grid_thw"]
    _, h, w = grid[0].tolist()
    height, width = h * 14, w * 14  # the model's input: 1092 x 1932
    box = [round(480 * width / 1920), round(270 * height / 1080)]
    box += [round(1440 * width / 1920), round(810 * height / 1080)]
    answer = f"<answer>{box}</answer>"
    with_grid = iou_reward([answer], [TRUTH], image_path=[photo], image_grid_thw=grid)
    computed = iou_reward([answer], [TRUTH], image_path=[photo])
    assert with_grid == computed == [pytest.approx(1.0)]


def test_a_row_names_its_own_format(photo: str) -> None:
    """A dataset that mixes families: each row's ``box_format`` column wins over the reward's."""
    answers = ["<answer>[250, 250, 750, 750]</answer>", "<answer>[483, 273, 1449, 819]</answer>"]
    rewards = iou_reward(
        answers,
        [TRUTH, TRUTH],
        image_path=[photo, photo],
        box_format=["qwen3_vl", "qwen2_5_vl"],  # TRL passes a column as a list
    )
    assert rewards == [1.0, pytest.approx(1.0)]
    component = build_component("iou", {"box_format": "original"})
    sample = {"completion": answers[0], "solution": TRUTH, "image_path": photo}
    assert component.score({**sample, "box_format": "qwen3_vl"}).value == 1.0
    assert component.score(sample).value < 0.25  # the reward's own format: as written
    bad = component.score({**sample, "box_format": "qwen_3"})
    assert bad.status.value == "error" and "did you mean 'qwen3_vl'" in bad.error


def test_processor_settings_apply_to_resized_formats_only(photo: str) -> None:
    choice = BoxFormatChoice.build("qwen3_vl", max_pixels=401408)
    assert choice.default == FAMILIES["qwen3_vl"]  # relative boxes: no resize to set
    row_format = choice.for_row({"box_format": "qwen2_5_vl"})
    assert row_format.max_pixels == 401408 and row_format.resized(1920, 1080) == (840, 448)


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ({}, "image_path: missing; box_format 'qwen3_vl' gives boxes relative to the image"),
        ({"image_path": "/no/such.png"}, "image_path: cannot read image"),
    ],
)
def test_relative_formats_need_the_image(columns: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        row_converter(columns, FAMILIES["qwen3_vl"])


def test_old_names_keep_working(photo: str) -> None:
    assert BoxFormatChoice.build(box_coords="model_input").default.name == "resized_pixels"
    assert BoxFormatChoice.build(box_coords="original").default == FAMILIES["original"]
    sixteen = BoxFormatChoice.build(box_coords="model_input", patch_size=16).default
    assert sixteen.factor == 32
    with pytest.raises(ValueError, match="box_coords: the former name of box_format"):
        BoxFormatChoice.build("qwen3_vl", box_coords="original")
    with pytest.raises(ValueError, match="min_pixels: 500 is above max_pixels 400"):
        BoxFormatChoice.build(min_pixels=500, max_pixels=400)


@pytest.mark.parametrize("name", ["iou", "detection", "coco_map", "format_rec"])
def test_box_rewards_take_a_format_and_pickle(name: str) -> None:
    reward = make_reward(name, box_format="qwen3_vl", max_pixels=401408)
    again = pickle.loads(pickle.dumps(reward))
    assert again.__name__ == reward.__name__
    assert again._component.box_format == reward._component.box_format  # noqa: SLF001


def test_detection_and_coco_map_convert_qwen3_vl_boxes(photo: str) -> None:
    truth = '```json\n[{"bbox_2d": [480, 270, 1440, 810], "label": "cat"}]\n```'
    answer = '<answer>```json\n[{"bbox_2d": [250, 250, 750, 750], "label": "cat"}]\n```</answer>'
    for name in ("detection", "coco_map"):
        native = make_reward(name, box_format="qwen3_vl")([answer], [truth], image_path=[photo])
        as_written = make_reward(name)([answer], [truth], image_path=[photo])
        assert native[0] == pytest.approx(1.0) and as_written[0] < 0.5, name


@pytest.mark.parametrize(
    ("content", "box_format", "expected"),
    [
        ('<think>a</think><answer>{"bbox_2d": [1, 2, 3, 4]}</answer>', "qwen3_vl", 1.0),
        ('<think>a</think><answer>{"bbox_2d": [0.1, 0.2, 0.3, 0.4]}</answer>', "qwen3_vl", 0.0),
        ('<think>a</think><answer>{"bbox_2d": [0.1, 0.2, 0.3, 0.4]}</answer>', "relative_1", 1.0),
        ('<think>a</think><answer>{"bbox_2d": [0, 0, 1, 1]}</answer>', "relative_1", 1.0),
    ],
)
def test_format_rec_accepts_fractions_for_relative_1(
    content: str, box_format: str, expected: float
) -> None:
    assert make_reward("format_rec", box_format=box_format)([content]) == [expected]
    assert (
        build_component("format_rec").score({"completion": content, "box_format": box_format}).value
        == expected
    )
