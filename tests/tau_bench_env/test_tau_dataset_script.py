"""The SkyRL dataset writer (scripts/data/tau_bench_dataset.py)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import skyrl_gym

SCRIPT = Path(__file__).parents[2] / "scripts" / "data" / "tau_bench_dataset.py"


@pytest.mark.parametrize(
    ("domain", "split", "rows"), [("retail", "train", 74), ("airline", "test", 20)]
)
def test_dataset_rows_make_working_envs(tmp_path: Path, domain: str, split: str, rows: int) -> None:
    module = runpy.run_path(str(SCRIPT))
    out = tmp_path / f"{domain}.parquet"
    module["main"](["--backend", "tau2", "--domain", domain, "--split", split, "--out", str(out)])
    table = pq.read_table(out).to_pylist()
    assert len(table) == rows
    row = table[-1]
    assert row["env_class"] == "tau_bench_env" and row["prompt"][0]["role"] == "system"
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    env = skyrl_gym.make(
        row["env_class"],
        env_config={"backend": "tau2", "user": {"kind": "replay"}},
        extras={**extras, "user_turns": ["hi"]},
    )
    messages, _ = env.init(row["prompt"])
    assert messages[0] == row["prompt"][0]
    assert env.task.task_id == row["task_id"]
