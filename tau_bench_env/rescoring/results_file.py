"""Reading a results file from disk for ``rescore``, bounded, every failure a one-line error.

:func:`load_results` checks the file's size before reading it (a cap the
caller may raise), decodes it as UTF-8 and parses it as JSON. Each way this
can fail raises :class:`ResultsFileError` (a ``ValueError``) whose message
names the file, the cause and the fix: a file over the cap, one that is not
UTF-8, one that ends before its JSON does (*truncated*: cut off while being
written or copied), other malformed JSON with its line and column, and JSON
nested deeper than Python's parser goes (it raises ``RecursionError``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIB = 1024 * 1024
DEFAULT_MAX_MIB = 512
"""Largest results file read by default; parsing takes several times its size in memory."""


class ResultsFileError(ValueError):
    """A results file that cannot be read or parsed; the message names file, cause and fix."""


SIMULATIONS_DIR = "simulations"
"""tau2's "dir" results format: ``results.json`` (no ``simulations``, a ``simulation_index``)
beside this folder of one ``<simulation id>.json`` per simulation (tau2's ``Results.save``)."""
META_FILE = "results.json"


def is_dir_results(path: Path) -> bool:
    """Whether ``path`` is tau2's "dir" format: a folder, or a file beside a ``simulations/``
    folder (tau2's own ``Results._detect_format``)."""
    return path.is_dir() or (path.parent / SIMULATIONS_DIR).is_dir()


def load_results(path: Path, *, max_mib: float = DEFAULT_MAX_MIB) -> Any:
    """The parsed JSON of the results file at ``path``, at most ``max_mib`` MiB.

    tau2's "dir" format (:func:`is_dir_results`) is read as the single-file
    object it stands for (:func:`load_dir_results`). Raises
    :class:`ResultsFileError` (see the module docstring) and ``OSError`` when
    the file cannot be opened.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
    ...     _ = f.write('[{"task_id": 0, "traj": [')
    ...     f.flush()
    ...     load_results(Path(f.name))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tau_bench_env.rescoring.results_file.ResultsFileError: ...: the file is truncated: ...
    """
    if is_dir_results(path):
        return load_dir_results(path, max_mib=max_mib)
    return _load_json(path, path.stat().st_size, max_mib)


def load_dir_results(path: Path, *, max_mib: float = DEFAULT_MAX_MIB) -> dict[str, Any]:
    """tau2's "dir" results at ``path`` (the folder or its ``results.json``) as one object.

    The metadata's ``simulations`` become the files of ``simulations/``, in the
    order of the metadata's ``simulation_index`` (the order tau2 ran and saved
    them; by file name without an index, as tau2 loads them). ``max_mib`` caps
    all the files together. Raises :class:`ResultsFileError` naming the file
    and the field when the index names a simulation without a file or a file
    the index lacks (tau2's integrity check), or a simulation file's ``id`` is
    not its name.
    """
    folder = path if path.is_dir() else path.parent
    meta_path = folder / META_FILE if path.is_dir() else path
    sims_dir = folder / SIMULATIONS_DIR
    files = sorted(sims_dir.glob("*.json")) if sims_dir.is_dir() else []
    total = meta_path.stat().st_size + sum(f.stat().st_size for f in files)
    meta = _load_json(meta_path, total, max_mib)
    if not isinstance(meta, dict):
        raise ResultsFileError(f"{meta_path}: a dir-format results.json must hold an object")
    meta.pop("format_version", None)
    by_id = {f.stem: f for f in files}
    index = meta.get("simulation_index")
    if index is None:
        order = list(by_id)
    else:
        if not isinstance(index, list) or not all(
            isinstance(e, dict) and isinstance(e.get("id"), str) for e in index
        ):
            raise ResultsFileError(
                f"{meta_path}: simulation_index must be a list of objects with a string 'id'"
            )
        order = [e["id"] for e in index]
        missing, extra = sorted(set(order) - set(by_id)), sorted(set(by_id) - set(order))
        if missing or extra:
            raise ResultsFileError(
                f"{meta_path}: simulation_index and {sims_dir} disagree (missing simulation "
                f"files: {missing}; files not in the index: {extra}); copy the whole folder again"
            )
    simulations = []
    for sim_id in order:
        simulation = _load_json(by_id[sim_id], by_id[sim_id].stat().st_size, max_mib)
        if not isinstance(simulation, dict) or simulation.get("id") != sim_id:
            raise ResultsFileError(
                f"{by_id[sim_id]}: must hold a simulation object whose 'id' is {sim_id!r} "
                "(its file name)"
            )
        simulations.append(simulation)
    meta["simulations"] = simulations
    return meta


def _load_json(path: Path, size: int, max_mib: float) -> Any:
    """The parsed JSON of ``path``, refused when ``size`` (its own, or its run's) is over the cap."""
    if size > max_mib * MIB:
        raise ResultsFileError(
            f"{path}: the file is {size / MIB:.1f} MiB, over the {max_mib:g} MiB cap on "
            f"results files; pass --max-file-mib {int(size / MIB) + 1} to read it"
        )
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ResultsFileError(
            f"{path}: not UTF-8 text (byte {error.start}); a results file is JSON as tau-bench "
            "or tau2 writes it"
        ) from error
    if not text.strip():
        raise ResultsFileError(f"{path}: the file is empty; write the results again")
    try:
        return json.loads(text)
    except RecursionError as error:
        raise ResultsFileError(
            f"{path}: its JSON is nested deeper than the parser allows; a results file is not "
            "nested that deep, so this is not one (or it was damaged)"
        ) from error
    except json.JSONDecodeError as error:
        # the parser stopped at the end of the text, or in a string the text ends inside
        if error.pos >= len(text.rstrip()) or error.msg.startswith("Unterminated string"):
            raise ResultsFileError(
                f"{path}: the file is truncated: its JSON ends at byte {len(text.encode())} "
                f"before it is complete ({error.msg}); it was cut off while being written "
                "or copied: write or copy it again"
            ) from error
        raise ResultsFileError(
            f"{path}: not valid JSON: {error.msg} at line {error.lineno} column {error.colno}; "
            "a results file is JSON as tau-bench or tau2 writes it"
        ) from error
