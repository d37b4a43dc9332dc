"""Write SkyRL prompt parquet (train.parquet, validation.parquet) from this project's JSONL rows.

    python scripts/data/prepare_skyrl_data.py --input skyrl_rewards/sample_data/rec.jsonl \
        --out-dir out/data/rec --env-class skyrl_rewards

For a vision-language policy, name its box format: every row then carries
``box_format`` (which the box rewards read) and the family's grounding
instruction; a resized-pixel row (``qwen2_5_vl``) also carries the engine's
processor settings given here (``image_resize``), which the box rewards use
for it, so the reward needs no second copy of them; a row's
``image_grid_thw`` must be the resize at those settings (a grid from another
engine is stale: the line is refused, naming both grids):

    python scripts/data/prepare_skyrl_data.py --input rec.jsonl --out-dir out/data/rec --box-format qwen3_vl
    python scripts/data/prepare_skyrl_data.py --input rec.jsonl --out-dir out/data/rec \
        --box-format qwen2_5_vl --max-pixels 1003520   # the engine's processor settings

The row format is documented in skyrl_rewards/train/dataset.py; the paths
written are printed, one per line (train first).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from skyrl_rewards.rewards.geometry.box_formats import FAMILIES, BoxFormatChoice
from skyrl_rewards.train.dataset import prepare_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--input", type=Path, required=True, help="JSONL rows (problem, solution, ...)"
    )
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--env-class", default="skyrl_rewards")
    parser.add_argument("--val-fraction", type=float, default=0.25)
    parser.add_argument(
        "--box-format",
        choices=list(FAMILIES),
        help="the policy's box format (model family): grounding prompt and box_format column",
    )
    parser.add_argument("--min-pixels", type=int, help="the engine processor's min_pixels")
    parser.add_argument("--max-pixels", type=int, help="the engine processor's max_pixels")
    parser.add_argument(
        "--patch-size", type=int, help="the vision tower's patch size (14 for Qwen2.5-VL, 16)"
    )
    args = parser.parse_args()
    settings = (args.min_pixels, args.max_pixels, args.patch_size)
    box_format = None
    if args.box_format is None and any(value is not None for value in settings):
        parser.error("--min-pixels/--max-pixels/--patch-size need --box-format")
    try:
        if args.box_format is not None:
            box_format = BoxFormatChoice.build(
                args.box_format,
                min_pixels=args.min_pixels,
                max_pixels=args.max_pixels,
                patch_size=args.patch_size,
            )
        paths = prepare_data(
            args.input,
            args.out_dir,
            args.env_class,
            val_fraction=args.val_fraction,
            box_format=box_format,
        )
    except ValueError as error:
        sys.exit(f"prepare_skyrl_data: {error}")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
