"""Write a SkyRL training dataset (parquet) from a tau-bench domain's task split.

One row per task: ``prompt`` (the system prompt: policy, tools, call format;
the env replaces it at ``init`` with the same text plus the user's first
message), ``env_class`` (``tau_bench_env``) and the fields SkyRL passes to the
env as ``extras``: ``domain``, ``split``, ``task_index``, ``task_id``, plus
``data_source`` and ``reward_spec`` (the reward is computed by the env).

Usage:
    python scripts/data/tau_bench_dataset.py --backend tau2 --domain retail --split train \
        --out ~/data/tau_bench/retail_train.parquet
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tau_bench_env import ENV_ID
from tau_bench_env.backends import BACKENDS, load_domain
from tau_bench_env.episode.prompts import system_prompt


def dataset_rows(backend: str, domain_name: str, split: str) -> list[dict[str, Any]]:
    """The rows for every task of ``split`` (raises ``ValueError`` on a bad name)."""
    domain = load_domain(backend, domain_name)
    prompt = [{"role": "system", "content": system_prompt(domain)}]
    return [
        {
            "data_source": f"tau_bench/{backend}/{domain_name}",
            "prompt": prompt,
            "env_class": ENV_ID,
            "reward_spec": {"method": "env", "ground_truth": task.task_id},
            "domain": domain_name,
            "split": split,
            "task_index": index,
            "task_id": task.task_id,
        }
        for index, task in enumerate(domain.tasks(split))
    ]


def write_dataset(rows: list[dict[str, Any]], out: Path) -> None:
    """Write ``rows`` to ``out`` as parquet (parent folders created)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), out)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tau2", choices=sorted(BACKENDS))
    parser.add_argument("--domain", required=True, choices=["airline", "retail"])
    parser.add_argument("--split", default="train")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    rows = dataset_rows(args.backend, args.domain, args.split)
    write_dataset(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")  # noqa: T201 - script output


if __name__ == "__main__":
    main()
