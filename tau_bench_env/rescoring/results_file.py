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


def load_results(path: Path, *, max_mib: float = DEFAULT_MAX_MIB) -> Any:
    """The parsed JSON of the results file at ``path``, at most ``max_mib`` MiB.

    Raises :class:`ResultsFileError` (see the module docstring) and ``OSError``
    when the file cannot be opened.

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
    ...     _ = f.write('[{"task_id": 0, "traj": [')
    ...     f.flush()
    ...     load_results(Path(f.name))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    tau_bench_env.rescoring.results_file.ResultsFileError: ...: the file is truncated: ...
    """
    size = path.stat().st_size
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
