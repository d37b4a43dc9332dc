"""The `skyrl-rewards` command line end to end on the sample data, with real rewards and a real pool."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image

from skyrl_rewards.cli.main import main
from skyrl_rewards.data.jsonl import read_rows, to_samples
from skyrl_rewards.pool.config import load_pool_config
from skyrl_rewards.rewards.mix import RewardMix

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT / "skyrl_rewards" / "sample_data"
CONFIGS = ROOT / "configs"


def run_cli(
    *args: str, cwd: Path = ROOT, timeout_s: float = 240
) -> subprocess.CompletedProcess[str]:
    """``python -m skyrl_rewards.cli ARGS`` in a fresh process (its own local Ray)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("RAY_ADDRESS", None)
    return subprocess.run(
        [sys.executable, "-m", "skyrl_rewards.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def expected_totals(task: str) -> list[float]:
    mix = RewardMix.from_config(load_pool_config(CONFIGS / f"{task}.yaml").rewards)
    return [mix.score(s).total for s in to_samples(read_rows(SAMPLE / f"{task}.jsonl"), SAMPLE)]


def assert_scored_output(output: Path, task: str, components: list[str]) -> None:
    rows = read_rows(output)
    inputs = read_rows(SAMPLE / f"{task}.jsonl")
    assert [r["id"] for r in rows] == [r["id"] for r in inputs]
    assert all(
        row["image_path"] == src["image_path"]
        for row, src in zip(rows, inputs, strict=True)
        if "image_path" in src
    )
    assert [r["reward"]["total"] for r in rows] == pytest.approx(expected_totals(task))
    for row in rows:
        assert list(row["reward"]["components"]) == components
        assert row["reward"]["should_mask"] is False
    for name in [*components, "total"]:
        png = output.with_name(f"{output.stem}.{name}.png")
        with Image.open(png) as image:
            assert image.format == "PNG" and image.size[0] > 100


def test_readme_command_scores_the_sample_in_a_fresh_process(tmp_path: Path) -> None:
    """The README's first command: its own local Ray, the pool, the table and the plots."""
    output = tmp_path / "out" / "rec.jsonl"
    proc = run_cli(
        "score",
        "--config",
        "configs/rec.yaml",
        "--input",
        "skyrl_rewards/sample_data/rec.jsonl",
        "--output",
        str(output),
        "num_workers=1",
    )
    assert proc.returncode == 0, proc.stderr
    assert_scored_output(output, "rec", ["iou", "format_rec"])
    table = proc.stdout.splitlines()
    assert table[0].split() == [
        "component",
        "mean",
        "std",
        "at",
        "floor",
        "unparseable",
        "errors",
        "timeouts",
    ]
    assert [line.split()[0] for line in table[2:5]] == ["iou", "format_rec", "total"]
    assert "scoring" in proc.stderr and "24/24" in proc.stderr  # the tqdm progress bar


@pytest.mark.parametrize(
    ("task", "components"),
    [
        ("detection", ["detection", "format", "repetition", "length"]),
        ("math", ["accuracy", "format"]),
    ],
)
def test_score_through_a_pool_on_the_running_ray(
    ray_local, tmp_path, capsys, task, components
) -> None:
    output = tmp_path / f"{task}.jsonl"
    code = main(
        [
            "score",
            "--config",
            str(CONFIGS / f"{task}.yaml"),
            "--input",
            str(SAMPLE / f"{task}.jsonl"),
            "--output",
            str(output),
            "--no-progress",
            "num_workers=1",
        ]
    )
    assert code == 0
    assert_scored_output(output, task, components)
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[2 : 3 + len(components)]] == [
        *components,
        "total",
    ]


def test_check_passes_on_the_sample(capsys) -> None:
    code = main(
        ["check", "--config", str(CONFIGS / "rec.yaml"), "--input", str(SAMPLE / "rec.jsonl")]
    )
    assert code == 0
    assert "checked 24 rows" in capsys.readouterr().out


def test_check_lists_the_rows_that_would_be_dataset_errors(tmp_path: Path, capsys) -> None:
    good = read_rows(SAMPLE / "rec.jsonl")[0]
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "broken.png").write_bytes(b"not a png")
    image = str(SAMPLE / good["image_path"])
    rows = [
        {**good, "id": "ok", "image_path": image},  # fine
        {**good, "id": "gone", "image_path": "images/missing.png"},  # missing image, relative path
        {**good, "id": "junk", "image_path": "images/broken.png"},  # unreadable image
        {k: v for k, v in good.items() if k != "solution"} | {"id": "nosol", "image_path": image},
        {**good, "id": "badgrid", "image_path": image, "image_grid_thw": [1, 2]},  # not (t, h, w)
        {**good, "id": "badgt", "image_path": image, "solution": "<answer>left</answer>"},  # no box
    ]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["check", "--config", str(CONFIGS / "rec.yaml"), "--input", str(data)])
    out = capsys.readouterr().out
    assert code == 1
    flagged = {line.split(":")[0] for line in out.splitlines() if line.startswith("row ")}
    assert flagged == {
        f"row {i} (id {name})"
        for i, name in enumerate(["ok", "gone", "junk", "nosol", "badgrid", "badgt"])
        if i
    }
    assert "row 1 (id gone): image_path: image not found" in out
    assert "row 2 (id junk): image_path: image unreadable" in out
    assert "row 3 (id nosol): solution: missing field" in out
    assert "row 4 (id badgrid): iou: error: image_grid_thw" in out
    assert "row 5 (id badgt): iou: error: solution: expected a JSON box" in out
    assert "5 with problems" in out


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"completion": "x", "solution": "1"}', "{oops"], "rows.jsonl:2: not valid JSON"),
        (['{"id": "a", "solution": "1"}'], "row 0 (id a): missing field 'completion'"),
        (['["a list"]'], "rows.jsonl:1: expected a JSON object"),
    ],
)
def test_score_rejects_a_bad_input_naming_the_row(tmp_path: Path, capsys, lines, message) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text("\n".join(lines) + "\n")
    code = main(
        [
            "score",
            "--config",
            str(CONFIGS / "math.yaml"),
            "--input",
            str(data),
            "--output",
            str(tmp_path / "o.jsonl"),
        ]
    )
    assert code == 2
    assert message in capsys.readouterr().err


def test_bad_config_override_is_a_usage_error(capsys) -> None:
    code = main(
        [
            "check",
            "--config",
            str(CONFIGS / "rec.yaml"),
            "--input",
            str(SAMPLE / "rec.jsonl"),
            "num_wrkers=2",
        ]
    )
    assert code == 2
    assert "num_wrkers" in capsys.readouterr().err


def test_pool_start_status_stop_on_a_running_cluster(ray_local) -> None:
    """`pool start` leaves a pool that outlives the command; `status` and `stop` reach it by name."""
    import ray

    from skyrl_rewards.pool.reward_pool import RewardPool

    address = ray.get_runtime_context().gcs_address
    name = "test_cli_detached_pool"
    started = run_cli(
        "pool",
        "start",
        "--config",
        "configs/rec.yaml",
        f"name={name}",
        "num_workers=1",
        f"address={address}",
    )
    assert started.returncode == 0, started.stderr
    assert f"reward pool '{name}' started" in started.stdout
    samples = to_samples(read_rows(SAMPLE / "rec.jsonl"), SAMPLE)[:6]
    with RewardPool.connect(name) as client:  # the starting process is gone; the pool scores
        assert [r.total for r in client.score(samples)] == pytest.approx(expected_totals("rec")[:6])
    status = run_cli("pool", "status", "--name", name, "--address", address)
    assert status.returncode == 0, status.stderr
    assert "workers: 1" in status.stdout and "iou (weight 1.0)" in status.stdout
    again = run_cli(
        "pool", "start", "--config", "configs/rec.yaml", f"name={name}", f"address={address}"
    )
    assert again.returncode == 2 and "already runs" in again.stderr
    stopped = run_cli("pool", "stop", "--name", name, "--address", address)
    assert stopped.returncode == 0, stopped.stderr
    with pytest.raises(ValueError):
        RewardPool.connect(name)
    gone = run_cli("pool", "status", "--name", name, "--address", address)
    assert gone.returncode == 2 and f"no reward pool '{name}'" in gone.stderr


def test_bench_runs_the_pool_benchmark_with_its_own_options(ray_local, capsys) -> None:
    code = main(
        ["bench", "--prompts", "2", "--group-size", "2", "--steps", "1", "--workloads", "mixed"]
        + ["--engines", "loop", "pool", "--num-workers", "1"]
    )
    assert code == 0
    out = capsys.readouterr().out
    assert "| engine | items |" in out
    assert [
        line.split("|")[1].strip()
        for line in out.splitlines()
        if line.startswith("| loop") or line.startswith("| pool")
    ] == ["loop", "pool"]
