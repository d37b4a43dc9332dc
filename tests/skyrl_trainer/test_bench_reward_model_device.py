"""scripts/benchmarks/bench_reward_model_device.py: the models of issue 46's table, and its CPU mode.

The GPU run of this benchmark happens on a machine with a stock PyTorch image
(torch, torchvision, transformers; no TRL, no SkyRL), so the script must
build everything itself. Checked here, on CPU:

- the models have the table's shapes: 1.31B and 6.53B parameters without the
  embedding for the Qwen2-1.5B and Qwen2-7B shapes, 3.44B for the
  Qwen2.5-VL-3B shape (built on the meta device: no memory, no time), and the
  VL processor is read back with the torchvision image processor, as the
  runner reads a checkpoint's;
- ``--device cpu --small`` in bfloat16 writes one JSON line with every figure
  of each model (items/s, tokens/s, fraction of the measured matrix-product
  rate, the floor, the bare loop, the budget sweep, both spreads, the
  preprocessing and forward shares, the VL images per image-processor call),
  ``batch_invariant``'s spread within 1e-3, and imports none of the tests'
  helpers, TRL or SkyRL (whose CPU stand-ins would replace
  ``torch.cuda.synchronize``).

Runs in ``.venv-skyrl``: the Qwen2.5-VL processor needs torchvision.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "benchmarks" / "bench_reward_model_device.py"
FOREIGN = ("trl", "skyrl", "ray", "omegaconf", "cpu_training_step", "stand_ins", "skyrl_helpers")
"""Modules a stock PyTorch image lacks, or the tests' own: the benchmark imports none of them."""
RUN = f"""
import json, runpy, sys
import torch
synchronize = torch.cuda.synchronize
sys.argv = [{str(BENCH)!r}, *sys.argv[1:]]
sys.path.insert(0, {str(BENCH.parent)!r})
runpy.run_path({str(BENCH)!r}, run_name="__main__")
foreign = [name for name in {FOREIGN!r} if name in sys.modules]
print(json.dumps({{"foreign": foreign, "synchronize": torch.cuda.synchronize is synchronize}}))
"""


@pytest.fixture(scope="module")
def bench() -> object:
    sys.path.insert(0, str(BENCH.parent))
    try:
        import bench_reward_model_device
    finally:
        sys.path.remove(str(BENCH.parent))
    return bench_reward_model_device


def test_the_models_have_the_issue_tables_shapes(bench: object) -> None:
    tokenizer = bench.word_tokenizer()  # type: ignore[attr-defined]
    counts = {
        name: bench.text_classifier(name, tokenizer, False, "meta", torch.bfloat16)[1]  # type: ignore[attr-defined]
        for name in ("qwen2-1.5b", "qwen2-7b")
    }
    assert counts == {
        "qwen2-1.5b": pytest.approx(1.31e9, rel=0.005),
        "qwen2-7b": pytest.approx(6.53e9, rel=0.005),
    }
    with tempfile.TemporaryDirectory() as folder:
        processor = bench.vl_processor(Path(folder), False)  # type: ignore[attr-defined]
    backends = [cls.__name__ for cls in type(processor.image_processor).__mro__]
    assert "TorchvisionBackend" in backends or getattr(processor.image_processor, "is_fast", False)
    _, language, vision = bench.vl_classifier(processor, False, "meta", torch.bfloat16)  # type: ignore[attr-defined]
    assert language + vision == pytest.approx(3.44e9, rel=0.005)


def test_cpu_mode_writes_one_json_line_with_every_figure(tmp_path: Path) -> None:
    args = ["--device", "cpu", "--small", "--dtype", "bfloat16", "--rounds", "1"]
    args += ["--items", "24", "--vl-items", "6", "--spread-items", "6"]
    args += ["--out", str(tmp_path / "report.json")]
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    *_, line, imports = done.stdout.strip().splitlines()
    assert json.loads(imports) == {"foreign": [], "synchronize": True}
    report = json.loads(line)
    assert json.loads((tmp_path / "report.json").read_text()) == report  # written per model
    assert report["device"] == "cpu" and report["dtype"] == "bfloat16"
    assert report["peak_source"] == "matmul_tflops (measured here)"
    assert report["peak_tflops"] == report["matmul_tflops"] > 0
    for name, items in (("qwen2-1.5b", 24), ("qwen2.5-vl-3b", 6)):
        model = report[name]
        assert model["items"] == items and model["tokens"] > items
        for key in (
            "runner_items_per_s",
            "runner_tokens_per_s",
            "runner_fraction_of_peak",
            "floor_fraction_of_peak",
            "runner_over_floor",
            "bare_over_runner",
            "batch_invariant_items_per_s",
            "batch_invariant_slowdown",
        ):
            assert model[key] > 0, key
        assert model["preprocess_share"] + model["forward_share"] == pytest.approx(1, abs=0.002)
        assert model["spread_batch_invariant"] <= 1e-3
        assert model["spread_runner"] >= 0 and model["max_abs_value"] > 0.1
    assert set(report["qwen2-1.5b"]["budget_s"]) == {"256", "1024", "4096", "16384"}
    assert set(report["qwen2.5-vl-3b"]["budget_s"]) == {"1024", "4096"}
    # the VL rows' images went through the image processor a batch at a time: six in one call
    assert report["qwen2.5-vl-3b"]["batches"] == 1
    assert report["qwen2.5-vl-3b"]["images_per_image_call"] == 6
