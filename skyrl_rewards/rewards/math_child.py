"""math-verify's check, and the child process behind the ``subprocess`` math guard.

This module imports nothing of ``skyrl_rewards`` (only the standard library and,
lazily, math-verify), so the child that runs it as a script loads math-verify
and SymPy and nothing else: about 0.45 s and 58 MB (see docs/rewards.md).
:mod:`skyrl_rewards.rewards.math_check` starts it as
``python -I math_child.py SYS_PATH_JSON``: isolated mode, so neither the
working directory nor the script's directory nor ``PYTHONPATH`` is on
``sys.path``; the parent hands over its own ``sys.path`` (without the working
directory) as the JSON list, so packages found through user site,
``PYTHONPATH`` or ``.pth`` files are still found, and a ``math_verify.py`` in
the working directory is not. Its start-up includes one check, so that the
parsers' first-use cost is not billed to a real check.

Protocol on stdin/stdout, one JSON line each way: the parent writes
``[gold, student]``, the child answers ``1`` (equal) or ``0``. It writes
``ready`` once its imports are done, and exits at end of input. The child
bounds nothing itself: the parent watches its CPU time and kills it.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from typing import Any


def verify_inline(gold: str, student: str) -> bool:
    """math-verify's ``verify(parse(gold), parse(student))`` with signal timeouts off, no bound.

    Parses of ``gold`` are cached (a prompt group shares its ground truth).
    Errors inside math-verify count as "not equal"; nothing is printed,
    logged or ``str()``-ed.

    >>> verify_inline("$\\\\frac{1}{2}$", "0.5")
    True
    """
    from math_verify import parse, verify

    try:
        gold_parsed = _parse_gold(gold)
        student_parsed = parse(student, parsing_timeout=None)  # type: ignore[arg-type]
        if not gold_parsed or not student_parsed:
            return False
        return bool(verify(list(gold_parsed), student_parsed, timeout_seconds=None))
    except (ValueError, TypeError, ArithmeticError, RecursionError, AttributeError):
        return False


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(parse(gold, parsing_timeout=None))  # type: ignore[arg-type]


def main(argv: list[str]) -> None:
    """Set ``sys.path`` from ``argv[1]`` (JSON list), import math-verify, serve until stdin closes."""
    if len(argv) > 1:
        sys.path[:] = [str(entry) for entry in json.loads(argv[1])]
    logging.disable(logging.WARNING)
    verify_inline("$\\frac{1}{2}$", "0.5")  # load math-verify and its parsers before "ready"

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            gold, student = json.loads(line)
            equal = verify_inline(str(gold), str(student))
        except (ValueError, TypeError):
            equal = False
        sys.stdout.write("1\n" if equal else "0\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv)
