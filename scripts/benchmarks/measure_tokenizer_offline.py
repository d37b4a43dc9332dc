"""Time how long a tokenizer given by hub name takes to fail when the hub cannot be reached.

Run on a machine without network (or with the hub blocked):

    python scripts/benchmarks/measure_tokenizer_offline.py [--name Qwen/Qwen2.5-0.5B-Instruct] [--transformers]

Prints the seconds ``make_reward("length", tokenizer=NAME)`` takes to raise, and with
``--transformers`` also what ``AutoTokenizer.from_pretrained(NAME)`` alone takes (its
retries are what the project's check avoids). Import time is reported apart.
"""

from __future__ import annotations

import argparse
import time


def timed(label: str, call) -> None:
    start = time.perf_counter()
    try:
        call()
        outcome = "loaded"
    except (OSError, ValueError) as error:
        outcome = f"{type(error).__name__}: {str(error)[:160]}"
    print(f"{label}: {time.perf_counter() - start:.2f} s ({outcome})")  # noqa: T201


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="Qwen/Qwen2.5-0.5B-Instruct")
    parser.add_argument("--transformers", action="store_true", help="also time transformers alone")
    args = parser.parse_args()

    start = time.perf_counter()
    from skyrl_rewards.rewards.batch import make_reward

    print(f"import skyrl_rewards.rewards.batch: {time.perf_counter() - start:.2f} s")  # noqa: T201
    timed(
        "make_reward('length', tokenizer=NAME)", lambda: make_reward("length", tokenizer=args.name)
    )
    if args.transformers:
        start = time.perf_counter()
        from transformers import AutoTokenizer

        print(f"import transformers.AutoTokenizer: {time.perf_counter() - start:.2f} s")  # noqa: T201
        timed(
            "AutoTokenizer.from_pretrained(NAME)", lambda: AutoTokenizer.from_pretrained(args.name)
        )


if __name__ == "__main__":
    main()
