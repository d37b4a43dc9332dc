"""Per-item cost of each reward function: median and p99 on a mixed sample, max on adversarial inputs.

Run: python scripts/benchmarks/bench_rewards.py [--items 2000] [--markdown]

Targets (issue 2): format and repetition under 50 us median for a 2 KB
completion; no function over 1 s on any adversarial input; IoU reads only the
image header (compare its cost with decoding the image). Issue 21: the cost
of one COCO mAP call on a 50-box scene (50 predicted, 50 ground-truth boxes,
10 labels), for each of the four methods.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from PIL import Image

from skyrl_rewards import (
    cosine_reward,
    default_accuracy_reward,
    detection_score,
    format_reward,
    format_reward_rec,
    iou_reward,
    repetition_reward,
)
from skyrl_rewards.rewards.boxes.coco_map import MAP_METHODS, coco_map
from skyrl_rewards.rewards.text.shaping import WordTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "rewards"))
import benchlib  # noqa: E402
from test_adversarial import ADVERSARIAL  # noqa: E402

_WORDS = "the model looks at the image and counts the red objects near the left edge of the table".split()


def _reasoning(rng: random.Random, chars: int) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < chars:
        words.append(rng.choice(_WORDS))
    return " ".join(words)[:chars]


def mixed_sample(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """``n`` (completion, solution) pairs of about 2 KB: math, choices, text, boxes, detections."""
    rng = random.Random(seed)
    pairs = []
    for i in range(n):
        think = _reasoning(rng, 1800)
        kind = i % 5
        if kind == 0:
            a, b = rng.randint(1, 9), rng.randint(2, 9)
            answer, sol = (
                rng.choice([f"$\\frac{{{a}}}{{{b}}}$", f"{a / b:.4f}", f"{a}/{b}"]),
                f"$\\frac{{{a}}}{{{b}}}$",
            )
        elif kind == 1:
            answer, sol = rng.choice(["B", "The answer is C.", "A"]), "B"
        elif kind == 2:
            answer, sol = rng.choice(["a red car", "red cars", "blue"]), "a red car"
        elif kind == 3:
            x, y = rng.randint(0, 200), rng.randint(0, 200)
            answer, sol = json.dumps({"bbox_2d": [x, y, x + 100, y + 80]}), "[50, 60, 150, 140]"
        else:
            items = [
                {"bbox_2d": [10 * k, 10 * k, 10 * k + 40, 10 * k + 40], "label": "cat"}
                for k in range(3)
            ]
            answer = "```json\n" + json.dumps(items[: rng.randint(1, 3)]) + "\n```"
            sol = "```json\n" + json.dumps(items) + "\n```"
        pairs.append(
            (f"<think>{think}</think>\n<answer>{answer}</answer>", f"<answer>{sol}</answer>")
        )
    return pairs


def box_scene(boxes: int = 50, labels: int = 10, seed: int = 0) -> tuple[str, str]:
    """A detection answer and its ground truth: ``boxes`` each, most predictions near a truth."""
    rng = random.Random(seed)
    names = [f"object {k}" for k in range(labels)]
    truth = []
    for _ in range(boxes):
        x, y = rng.uniform(0, 1800), rng.uniform(0, 1800)
        w, h = rng.uniform(20, 240), rng.uniform(20, 240)
        truth.append(
            {"bbox_2d": [round(c, 1) for c in (x, y, x + w, y + h)], "label": rng.choice(names)}
        )
    predicted = []
    for item in truth:
        jitter = rng.choice([0, 2, 5, 15, 40])
        box = [round(c + rng.uniform(-jitter, jitter), 1) for c in item["bbox_2d"]]
        label = item["label"] if rng.random() < 0.85 else rng.choice(names)
        predicted.append({"bbox_2d": box, "label": label})
    fence = "```json\n{}\n```"
    return (
        f"<think>{_reasoning(rng, 500)}</think><answer>{fence.format(json.dumps(predicted))}</answer>",
        f"<answer>{fence.format(json.dumps(truth))}</answer>",
    )


def _time_each(fn: Callable[[str, str], object], pairs: list[tuple[str, str]]) -> list[float]:
    return [benchlib.timed(fn, content, sol)[1] for content, sol in pairs]


def functions(image: str) -> dict[str, Callable[[str, str], object]]:
    """Each reward as ``f(content, solution)``."""
    tokenizer = WordTokenizer()
    det_sol = '<answer>```json [{"bbox_2d": [0, 0, 40, 40], "label": "cat"}]```</answer>'
    return {
        "default_accuracy_reward": lambda c, s: default_accuracy_reward(c, s),
        "iou_reward (header read)": lambda c, s: iou_reward(
            [c],
            ["<answer>[50, 60, 150, 140]</answer>"],
            image_grid_thw=[[1, 214, 286]],  # Qwen2.5-VL's grid for 4000x3000, checked
            image_path=[image],
        ),
        "detection_score": lambda c, s: detection_score(c, det_sol),
        "coco_map (od_ap)": lambda c, s: coco_map(c, det_sol, "od_ap"),
        "cosine_reward": lambda c, s: cosine_reward(c, tokenizer, 1.0),
        "repetition_reward": lambda c, s: repetition_reward(c),
        "format_reward": lambda c, s: format_reward([c]),
        "format_reward_rec": lambda c, s: format_reward_rec([c]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="mixed-sample size")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        image = str(Path(tmp) / "big.png")
        Image.new("RGB", (4000, 3000), (90, 30, 160)).save(image)
        with Image.open(image) as opened:
            decode_s = benchlib.timed(opened.load)[1]

        pairs = mixed_sample(args.items)
        default_accuracy_reward(*pairs[0])  # start the math-verify child outside the timings
        adversarial = [(c, "<answer>2</answer>") for c in ADVERSARIAL]
        print(
            f"mixed sample: {len(pairs)} items, median {statistics.median(len(c) for c, _ in pairs)} chars"
        )
        print(
            f"adversarial set: {len(adversarial)} inputs; decoding the 4000x3000 test image: {decode_s * 1e3:.1f} ms\n"
        )
        print("| function | median (us) | p99 (us) | adversarial max (ms) |")
        print("|---|---:|---:|---:|")
        for name, fn in functions(image).items():
            costs = _time_each(fn, pairs)
            worst = max(_time_each(fn, adversarial))
            p99 = benchlib.percentile(costs, 0.99)
            print(
                f"| {name} | {statistics.median(costs) * 1e6:.1f} | {p99 * 1e6:.1f} | {worst * 1e3:.1f} |"
            )
        content, solution = box_scene()
        print(
            "\nCOCO mAP, one call on a 50-box scene (50 predicted, 50 ground truth, 10 labels):\n"
        )
        print("| method | value | median (ms) | p99 (ms) |")
        print("|---|---:|---:|---:|")
        for method in MAP_METHODS:
            costs = _time_each(
                functools.partial(coco_map, method=method), [(content, solution)] * 200
            )
            p99 = benchlib.percentile(costs, 0.99)
            value = coco_map(content, solution, method)
            print(
                f"| {method} | {value:.4f} | {statistics.median(costs) * 1e3:.2f} | {p99 * 1e3:.2f} |"
            )


if __name__ == "__main__":
    main()
