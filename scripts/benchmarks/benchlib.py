"""What the benchmarks share: timing, medians and percentiles, the load, and ``--compare REV``.

A benchmark that compares code measures both sides on one machine in one run,
in turns, so that they share its load: :func:`compare_sides` runs a side
script once per revision per repeat (A, B, A, B, ...), each in its own
process with ``PYTHONPATH`` on that revision's tree (another commit is
extracted with ``git archive`` into a temporary folder; ``"."`` is this
checkout's working tree). The side script is the benchmark itself, from
this checkout, started with ``--side``: it prints one JSON object as its
last line of output.

A script beside this file imports it as ``benchlib`` (Python puts a script's
folder first on ``sys.path``; a script loaded by path, as ``skyrl-rewards
bench`` loads ``bench_pool.py``, adds its folder itself).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[2]
"""The checkout these scripts belong to."""
THIS_CHECKOUT = "."
"""The revision name of this checkout's working tree in a comparison."""

T = TypeVar("T")


def median(values: Iterable[float], digits: int = 3) -> float:
    """The median of ``values``, rounded to ``digits``.

    >>> median([3.0, 1.0, 2.0])
    2.0
    """
    return round(statistics.median(list(values)), digits)


def percentile(values: Iterable[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` in [0, 1]) of ``values``; not interpolated.

    >>> percentile(range(100), 0.99)
    99
    """
    ordered = sorted(values)
    if not ordered:
        raise ValueError("percentile of no values")
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def timed(call: Callable[..., T], *args: Any) -> tuple[T, float]:
    """``call(*args)``'s result and its wall time in seconds (``time.perf_counter``).

    >>> timed(sum, [1, 2])[0]
    3
    """
    start = time.perf_counter()
    result = call(*args)
    return result, time.perf_counter() - start


def load() -> float:
    """The machine's 1-minute load average, to print beside a figure (others share the CPUs)."""
    return round(os.getloadavg()[0], 2)


def add_compare_argument(parser: argparse.ArgumentParser, what: str) -> None:
    """``--compare REV ...`` (other revisions, run in turns with this checkout) and the hidden
    ``--side`` (this process is one side of a comparison)."""
    parser.add_argument(
        "--compare",
        nargs="+",
        default=[],
        metavar="REV",
        help=f"{what}: also run these git revisions, in turns with this checkout, side by side "
        "(e.g. --compare HEAD~3 e729040)",
    )
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)


def extract(revision: str, folder: Path) -> Path:
    """The tree of ``revision`` of this repository, extracted into ``folder`` (``git archive``);
    ``"."`` is this checkout's working tree itself."""
    if revision == THIS_CHECKOUT:
        return REPO
    tree = folder / revision.replace("/", "_")
    tree.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", revision], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def compare_sides(
    script: Path,
    revisions: Sequence[str],
    side_args: Callable[[int], Sequence[str]],
    *,
    repeats: int,
    timeout_s: float,
    on_result: Callable[[str, int, Mapping[str, Any]], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Run ``script --side *side_args(repeat)`` for each revision in turn, ``repeats`` times.

    Returns revision -> the JSON objects its side runs printed (their last
    line), in order. ``on_result(revision, repeat, result)`` sees each as it
    comes (to print progress). A side that fails or runs past ``timeout_s``
    raises ``RuntimeError`` with the end of its error output.
    """
    results: dict[str, list[dict[str, Any]]] = {rev: [] for rev in revisions}
    with tempfile.TemporaryDirectory(prefix="bench_compare_") as folder:
        trees = {rev: extract(rev, Path(folder)) for rev in revisions}
        for repeat in range(repeats):
            for rev in revisions:
                command = [sys.executable, str(script), "--side", *side_args(repeat)]
                env = {**os.environ, "PYTHONPATH": str(trees[rev])}
                try:
                    done = subprocess.run(
                        command,
                        env=env,
                        cwd=trees[rev],
                        capture_output=True,
                        text=True,
                        check=False,
                        timeout=timeout_s,
                    )
                except subprocess.TimeoutExpired as error:
                    raise RuntimeError(
                        f"{rev}: the side run did not finish within {timeout_s:g} s; "
                        "give it smaller sizes or fewer rounds"
                    ) from error
                if done.returncode != 0:
                    raise RuntimeError(f"{rev}: the side run failed:\n{done.stderr[-3000:]}")
                result = json.loads(done.stdout.strip().splitlines()[-1])
                results[rev].append(result)
                if on_result is not None:
                    on_result(rev, repeat, result)
    return results


def print_side(result: Mapping[str, Any]) -> None:
    """A side's answer to :func:`compare_sides`: one JSON line, last on standard output."""
    print(json.dumps(result), flush=True)


def progress(line: str) -> None:
    """A progress line on standard error (standard output carries the report)."""
    print(line, file=sys.stderr, flush=True)
