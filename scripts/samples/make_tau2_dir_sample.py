"""Write a tau2 results file in tau2's "dir" format (the one voice runs are saved in).

tau2-bench saves a voice run's ``Results`` as a folder (``Results.save(path,
format="dir")`` in ``src/tau2/data_model/simulation.py``): ``results.json``
holds the results without ``simulations`` and with a ``simulation_index`` (one
``{id, task_id, trial, reward, termination_reason, agent_cost, duration}`` per
simulation, in run order), and ``simulations/<id>.json`` each simulation,
indented by two spaces. This script writes that layout from a single-file
results JSON (by default the recorded airline sample, made by tau2's own code:
``scripts/samples/make_tau2_results_sample.py``), so that ``rescore`` on the
folder can be checked against ``rescore`` on the file it came from. tau2 is not
needed: the layout is written here as tau2's ``save`` writes it.

Usage:

    python scripts/samples/make_tau2_dir_sample.py \\
        --source tau_bench_env/sample_data/tau2_airline_results.json \\
        --out tau_bench_env/sample_data/tau2_airline_dir
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

DATA = Path(__file__).resolve().parents[2] / "tau_bench_env" / "sample_data"


def index_entry(simulation: dict) -> dict:
    """tau2's ``SimulationIndexEntry`` of one simulation."""
    reward_info = simulation.get("reward_info") or {}
    return {
        "id": simulation["id"],
        "task_id": simulation["task_id"],
        "trial": simulation["trial"],
        "reward": reward_info.get("reward"),
        "termination_reason": simulation.get("termination_reason"),
        "agent_cost": simulation.get("agent_cost"),
        "duration": simulation.get("duration"),
    }


def write_dir(results: dict, out: Path) -> None:
    """Write ``results`` (tau2's single-file object) to the folder ``out`` in "dir" format."""
    if out.exists():
        shutil.rmtree(out)
    (out / "simulations").mkdir(parents=True)
    meta = {key: value for key, value in results.items() if key != "simulations"}
    meta["simulation_index"] = [index_entry(s) for s in results["simulations"]]
    (out / "results.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    for simulation in results["simulations"]:
        path = out / "simulations" / f"{simulation['id']}.json"
        path.write_text(json.dumps(simulation, indent=2) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", type=Path, default=DATA / "tau2_airline_results.json")
    parser.add_argument("--out", type=Path, default=DATA / "tau2_airline_dir")
    args = parser.parse_args()
    write_dir(json.loads(args.source.read_text(encoding="utf-8")), args.out)


if __name__ == "__main__":
    main()
