"""``rescore`` reads tau2's "dir" results format (voice runs): the same figures as the file."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tau_helpers import SAMPLES

from tau_bench_env.cli.main import main
from tau_bench_env.rescoring.results_file import ResultsFileError, load_results

SINGLE = SAMPLES / "tau2_airline_results.json"
FOLDER = SAMPLES / "tau2_airline_dir"
SCRIPT = Path(__file__).parents[2] / "scripts" / "samples" / "make_tau2_dir_sample.py"


def rescored(path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["rescore", str(path), "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_dir_format_rescores_as_the_single_file(capsys: pytest.CaptureFixture[str]) -> None:
    expected = rescored(SINGLE, capsys)
    assert expected["runs"] == 9 and expected["agreement"] == 1.0
    # the folder, and its results.json (tau2 detects the format from either)
    assert rescored(FOLDER, capsys) == expected
    assert rescored(FOLDER / "results.json", capsys) == expected
    assert rescored(FOLDER, capsys, "--fresh-tasks") == rescored(SINGLE, capsys, "--fresh-tasks")


def test_the_dir_is_the_single_file_in_run_order() -> None:
    assert load_results(FOLDER) == {
        **json.loads(SINGLE.read_text()),
        "simulation_index": load_results(FOLDER)["simulation_index"],
    }
    meta = json.loads((FOLDER / "results.json").read_text())
    assert "simulations" not in meta
    assert [e["id"] for e in meta["simulation_index"]] == [
        s["id"] for s in json.loads(SINGLE.read_text())["simulations"]
    ]


def test_the_sample_script_writes_the_checked_in_sample(tmp_path: Path) -> None:
    out = tmp_path / "dir"
    subprocess.run(
        [sys.executable, str(SCRIPT), "--source", str(SINGLE), "--out", str(out)], check=True
    )
    written = sorted(p.relative_to(out) for p in out.rglob("*.json"))
    assert written == sorted(p.relative_to(FOLDER) for p in FOLDER.rglob("*.json"))
    for path in written:
        assert (out / path).read_bytes() == (FOLDER / path).read_bytes()


def test_a_missing_simulation_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "run"
    shutil.copytree(FOLDER, copy)
    (copy / "simulations" / "airline-3-trial1.json").unlink()
    with pytest.raises(
        ResultsFileError, match="missing simulation files: \\['airline-3-trial1'\\]"
    ):
        load_results(copy)
    assert main(["rescore", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "simulation_index and" in err and "copy the whole folder again" in err


def test_a_simulation_file_of_another_id_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(FOLDER, copy)
    path = copy / "simulations" / "airline-3-trial1.json"
    simulation = json.loads(path.read_text())
    path.write_text(json.dumps({**simulation, "id": "other"}))
    with pytest.raises(ResultsFileError, match="airline-3-trial1.json: must hold a simulation"):
        load_results(copy)


def test_the_cap_counts_every_file(tmp_path: Path) -> None:
    with pytest.raises(ResultsFileError, match="over the 0.01 MiB cap"):
        load_results(FOLDER, max_mib=0.01)
