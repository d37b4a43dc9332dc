"""Write SkyRL prompt parquet (train.parquet, validation.parquet) from this project's JSONL rows.

    python scripts/prepare_skyrl_data.py --input skyrl_rewards/sample_data/rec.jsonl \
        --out-dir ~/data/skyrl_rewards/rec --env-class skyrl_rewards

The row format is documented in skyrl_rewards/train/dataset.py; the paths
written are printed, one per line (train first).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from skyrl_rewards.train.dataset import prepare_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--input", type=Path, required=True, help="JSONL rows (problem, solution, ...)"
    )
    parser.add_argument("--out-dir", type=Path, required=True)
    parser.add_argument("--env-class", default="skyrl_rewards")
    parser.add_argument("--val-fraction", type=float, default=0.25)
    args = parser.parse_args()
    for path in prepare_data(
        args.input, args.out_dir, args.env_class, val_fraction=args.val_fraction
    ):
        print(path)


if __name__ == "__main__":
    main()
