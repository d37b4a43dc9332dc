"""Vision-language reward model throughput on the local path: token-budget batches against one input a pass.

Run (in ``.venv-skyrl``: the Qwen2.5-VL processor needs torchvision):
.venv-skyrl/bin/python scripts/benchmarks/bench_vl_reward_model.py [--items 128] [--rounds 3] [--threads 1]

The model is the tests' tiny random Qwen2.5-VL sequence classifier
(tests/skyrl_trainer/tiny_vl_reward_model.py, built here, no download); rows
carry one of four images of different sizes and completions of five lengths.
Both sides run :class:`~skyrl_rewards.rewards.models.vl_runner.VisionRewardModelRunner`
on the same requests, processor included in the timed region: ``batched``
with the default token budget, ``single`` with a budget of one token (every
input alone). Rounds are interleaved and medians reported with the load
average; the output is one JSON line.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import benchlib

sys.path.insert(0, str(benchlib.REPO / "tests" / "skyrl_trainer"))

SIZES = [(56, 56), (120, 40), (30, 90), (64, 200)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()

    import torch
    from PIL import Image
    from tiny_vl_reward_model import save_vl_model

    from skyrl_rewards.rewards.models.reward_model_component import RewardModel
    from skyrl_rewards.rewards.models.reward_model_runners import build_runner

    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="bench_vl_rm_"))
    save_vl_model(folder / "model")
    paths = []
    for index, size in enumerate(SIZES):
        path = folder / f"image{index}.png"
        Image.effect_mandelbrot(size, (-2.0, -1.5, 1.0, 1.5), 50).convert("RGB").save(path)
        paths.append(str(path))
    rows = [
        {
            "problem": f"where is the cat {index} ?",
            "completion": "the cat sits on a mat " * (1 + index % 5),
            "image_path": paths[index % len(paths)],
        }
        for index in range(args.items)
    ]
    sides = {}
    for name, budget in (("batched", 16384), ("single", 1)):
        component = RewardModel(str(folder / "model"), max_tokens_per_batch=budget)
        runner = build_runner(component.config)
        if runner.load_error:
            raise SystemExit(runner.load_error)
        runner.score([component.lane_request(row) for row in rows[:8]])  # warm-up
        sides[name] = (component, runner)
    seconds: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.rounds):
        for name, (component, runner) in sides.items():
            started = time.perf_counter()
            outcomes = runner.score([component.lane_request(row) for row in rows])
            seconds[name].append(time.perf_counter() - started)
            if not all(outcome.ok for outcome in outcomes):
                raise SystemExit(f"{name}: a row failed: {next(o for o in outcomes if not o.ok)}")
    result = {
        "items": args.items,
        "threads": args.threads,
        "load": benchlib.load(),
        **{
            f"{name}_items_per_s": round(args.items / benchlib.median(values), 1)
            for name, values in seconds.items()
        },
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
