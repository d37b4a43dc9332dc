"""Generate the sample data shipped in ``skyrl_rewards/sample_data/``.

Three small JSONL files, one per task, each row already holding a model
``completion`` next to its ``solution`` so the CLI can score them offline:

- ``rec.jsonl``: referring-expression grounding (one box per image),
  solutions ``<answer>[x1, y1, x2, y2]</answer>`` in original-image pixels,
  completions with boxes in model-input pixels (``image_grid_thw`` * 14).
- ``detection.jsonl``: several labelled shapes per image, solutions and
  completions as a ```` ```json ```` list of ``{"bbox_2d", "label"}``.
- ``math.jsonl``: arithmetic, fractions and multiple-choice questions about
  an image (VQA), ``accu_reward_method: default``.

Completions cycle through typical policy behaviours (exact, close, wrong,
missing format, unreadable answer, repetitive) so every reward component
shows a spread. Images are PNGs of a few hundred bytes drawn with Pillow;
``image_path`` in a row is relative to the JSONL file.

The output is deterministic: running the script again reproduces the shipped
files (``tests/test_sample_data.py`` checks it).

Usage: ``python scripts/samples/make_sample_data.py [--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

PATCH_PX = 14
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "skyrl_rewards" / "sample_data"
ROWS_PER_TASK = 24
COLORS = {
    "red": (220, 40, 40),
    "green": (40, 170, 60),
    "blue": (40, 80, 220),
    "yellow": (230, 200, 30),
}
BACKGROUND = (245, 245, 240)
SIZES = [(200, 150), (224, 168), (160, 160), (180, 120)]

Box = list[int]


def grid_thw(width: int, height: int) -> list[int]:
    """Qwen2-VL-style patch grid [t, h, w] for an image resized to multiples of 28 px."""
    return [1, max(1, round(height / 28)) * 2, max(1, round(width / 28)) * 2]


def to_model_input(box: Box, width: int, height: int, thw: list[int]) -> list[float]:
    """Map a box from original-image pixels to model-input pixels (the model's view)."""
    sx = thw[2] * PATCH_PX / width
    sy = thw[1] * PATCH_PX / height
    return [box[0] * sx, box[1] * sy, box[2] * sx, box[3] * sy]


def random_box(rng: random.Random, width: int, height: int, avoid: tuple[Box, ...] = ()) -> Box:
    """A box of 25-40% of the image side that overlaps none of ``avoid``."""
    for _ in range(200):
        w = rng.randint(width // 4, int(width * 0.4))
        h = rng.randint(height // 4, int(height * 0.4))
        x1 = rng.randint(2, width - w - 2)
        y1 = rng.randint(2, height - h - 2)
        box = [x1, y1, x1 + w, y1 + h]
        if all(box[2] < b[0] or box[0] > b[2] or box[3] < b[1] or box[1] > b[3] for b in avoid):
            return box
    raise RuntimeError("could not place a non-overlapping box; the image is too small")


def draw_shape(
    draw: ImageDraw.ImageDraw, shape: str, box: Box, color: tuple[int, int, int]
) -> None:
    """Draw ``shape`` (square, circle, triangle) filling ``box``."""
    if shape == "circle":
        draw.ellipse(box, fill=color)
    elif shape == "triangle":
        draw.polygon(
            [(box[0], box[3]), ((box[0] + box[2]) // 2, box[1]), (box[2], box[3])], fill=color
        )
    else:
        draw.rectangle(box, fill=color)


def save_png(image: Image.Image, path: Path) -> None:
    """Save as a small palette PNG (deterministic for a given Pillow)."""
    image.convert("P", palette=Image.Palette.ADAPTIVE, colors=8).save(path, optimize=True)


def fmt_box(box: list[float], decimals: bool = False) -> str:
    """A box as the model would write it."""
    if decimals:
        return "[" + ", ".join(f"{v:.1f}" for v in box) + "]"
    return "[" + ", ".join(str(round(v)) for v in box) + "]"


def rec_rows(rng: random.Random, images: Path) -> list[dict[str, Any]]:
    """Referring-expression rows: one target and one distractor per image."""
    rows = []
    color_names = list(COLORS)
    for i in range(ROWS_PER_TASK):
        width, height = SIZES[i % len(SIZES)]
        thw = grid_thw(width, height)
        target_color, other_color = rng.sample(color_names, 2)
        target = random_box(rng, width, height)
        other = random_box(rng, width, height, avoid=(target,))
        image = Image.new("RGB", (width, height), BACKGROUND)
        draw = ImageDraw.Draw(image)
        draw_shape(draw, "square", target, COLORS[target_color])
        draw_shape(draw, "square", other, COLORS[other_color])
        name = f"rec_{i:03d}.png"
        save_png(image, images / name)
        label = f"{target_color} square"
        exact = to_model_input(target, width, height, thw)
        shift = (target[2] - target[0]) * 0.3
        shifted = to_model_input(
            [target[0] + shift, target[1], target[2] + shift, target[3]], width, height, thw
        )
        wrong = to_model_input(other, width, height, thw)
        think = f"<think>The {label} is the {target_color} shape; I locate its corners.</think>"
        answers = [
            f'{think} <answer>{{"bbox_2d": {fmt_box(exact)}, "label": "{label}"}}</answer>',
            f'{think} <answer>{{"bbox_2d": {fmt_box(shifted)}, "label": "{label}"}}</answer>',
            f'{think} <answer>{{"bbox_2d": {fmt_box(wrong)}, "label": "{label}"}}</answer>',
            f"<answer>{fmt_box(exact)}</answer>",
            f"{think} <answer>I cannot find the {label} in this image.</answer>",
            f'{think} <answer>{{"bbox_2d": {fmt_box(exact, decimals=True)}, "label": "{label}"}}</answer>',
        ]
        rows.append(
            {
                "id": f"rec-{i:03d}",
                "problem": f"Please provide the bounding box coordinate of the region this sentence describes: the {label}.",
                "image_path": f"images/{name}",
                "image_grid_thw": thw,
                "solution": f"<answer>{fmt_box([float(v) for v in target])}</answer>",
                "completion": answers[i % len(answers)],
            }
        )
    return rows


def detection_json(objects: list[dict[str, Any]]) -> str:
    """Objects as the fenced JSON block VLM-R1 detection uses."""
    return "```json\n" + json.dumps(objects) + "\n```"


def detection_rows(rng: random.Random, images: Path) -> list[dict[str, Any]]:
    """Detection rows: two or three labelled shapes per image."""
    rows = []
    shapes = ["square", "circle", "triangle"]
    for i in range(ROWS_PER_TASK):
        width, height = SIZES[i % len(SIZES)]
        image = Image.new("RGB", (width, height), BACKGROUND)
        draw = ImageDraw.Draw(image)
        objects: list[dict[str, Any]] = []
        boxes: list[Box] = []
        for shape in rng.sample(shapes, 2 + i % 2):
            box = random_box(rng, width, height, avoid=tuple(boxes))
            boxes.append(box)
            draw_shape(draw, shape, box, COLORS[rng.choice(list(COLORS))])
            objects.append({"bbox_2d": box, "label": shape})
        name = f"det_{i:03d}.png"
        save_png(image, images / name)
        think = "<think>I look for squares, circles and triangles.</think>\n"
        wrong_label = [dict(objects[0], label="star"), *objects[1:]]
        extra = [*objects, {"bbox_2d": [0, 0, width // 5, height // 5], "label": "circle"}]
        answers = [
            f"{think}<answer>{detection_json(objects)}</answer>",
            f"{think}<answer>{detection_json(objects[:1])}</answer>",
            f"{think}<answer>{detection_json(extra)}</answer>",
            f"{think}<answer>{detection_json(wrong_label)}</answer>",
            f"{think}<answer>{detection_json(objects * 4)}</answer>",
            f'{think}<answer>```json\n[{{"bbox_2d": [1, 2, 3</answer>',
            "I see shapes. " * 12,
            f"<answer>{detection_json(objects)}</answer>",
        ]
        rows.append(
            {
                "id": f"det-{i:03d}",
                "problem": "Locate every square, circle and triangle; answer with a JSON list of bbox_2d and label.",
                "image_path": f"images/{name}",
                "image_grid_thw": grid_thw(width, height),
                "solution": f"<answer>{detection_json(objects)}</answer>",
                "completion": answers[i % len(answers)],
            }
        )
    return rows


def math_rows(rng: random.Random, images: Path) -> list[dict[str, Any]]:
    """Math and VQA rows: numbers, fractions, and multiple choice about an image."""
    rows = []
    think = "<think>Let me work it out step by step.</think> "
    for i in range(ROWS_PER_TASK):
        kind = i % 3
        row: dict[str, Any] = {"id": f"math-{i:03d}", "accu_reward_method": "default"}
        if kind == 0:
            a, b = rng.randint(2, 40), rng.randint(2, 40)
            gold = str(a * b)
            row["problem"] = f"What is {a} * {b}?"
            options = [gold, str(a * b + rng.randint(1, 9)), f"{a * b}.0"]
        elif kind == 1:
            den = rng.choice([2, 3, 4, 5, 8])
            gold = f"\\frac{{1}}{{{den}}}"
            row["problem"] = f"One of {den} equal slices is eaten. What fraction is eaten?"
            options = [gold, f"{1 / den:g}", f"\\frac{{2}}{{{den}}}"]
        else:
            width, height = SIZES[i % len(SIZES)]
            shape = rng.choice(["square", "circle", "triangle"])
            image = Image.new("RGB", (width, height), BACKGROUND)
            draw_shape(ImageDraw.Draw(image), shape, random_box(rng, width, height), COLORS["blue"])
            name = f"vqa_{i:03d}.png"
            save_png(image, images / name)
            letters = {"square": "A", "circle": "B", "triangle": "C"}
            gold = letters[shape]
            wrong = "A" if gold != "A" else "B"
            row["problem"] = "Which shape is in the image? A. square B. circle C. triangle"
            row["image_path"] = f"images/{name}"
            row["image_grid_thw"] = grid_thw(width, height)
            options = [f"{gold}.", f"{wrong}.", f"The answer is {gold}."]
        variant = (i // 3) % 4
        if variant < 3:
            completion = f"{think}<answer>{options[variant]}</answer>"
        else:
            completion = f"The answer is {options[0]}"
        row["solution"] = f"<answer>{gold}</answer>"
        row["completion"] = completion
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    """One JSON object per line, keys in insertion order, UTF-8."""
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def make_sample_data(out: Path) -> list[Path]:
    """Write the three task files and their images under ``out``; return the JSONL paths."""
    images = out / "images"
    images.mkdir(parents=True, exist_ok=True)
    written = []
    for task, build in (("rec", rec_rows), ("detection", detection_rows), ("math", math_rows)):
        path = out / f"{task}.jsonl"
        write_jsonl(path, build(random.Random(f"skyrl-rewards-{task}"), images))
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="output folder (default: the package's sample_data)",
    )
    args = parser.parse_args(argv)
    for path in make_sample_data(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
