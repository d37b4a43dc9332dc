"""math-verify's check, and the fork server behind the ``subprocess`` math guard.

This module imports nothing of ``skyrl_rewards`` (only the standard library and,
lazily, math-verify), so the process that runs it as a script loads math-verify
and SymPy and nothing else. :mod:`skyrl_rewards.rewards.text.math_check` starts it
as ``python -I math_child.py SYS_PATH_JSON SOCKET_FD``: isolated mode, so
neither the working directory nor the script's directory nor ``PYTHONPATH`` is
on ``sys.path``; the parent hands over its own ``sys.path`` (without the
working directory) as the JSON list, so packages found through user site,
``PYTHONPATH`` or ``.pth`` files are still found, and a ``math_verify.py`` in
the working directory is not.

That process is a *fork server*: it imports math-verify, warms its parsers up
with a few typical checks, freezes the garbage collector's view of the heap,
then forks a *child* per request. A fork costs a few milliseconds where a fresh
interpreter costs about half a second of CPU, so a child killed on a timeout is
cheap to replace. Protocol on the Unix socket ``SOCKET_FD``: the server sends
``ready\\n`` once warm; each request is a line holding a niceness increment,
sent with two file descriptors (the read end of the child's request pipe and the
write end of its answer pipe); the server answers the child's pid as a line.
The server exits when the socket closes. It does not wait for its children:
``SIGCHLD`` is ignored, so the kernel reaps them.

A child, on its pipes, one JSON line each way: the parent writes ``[gold,
student]``, the child answers ``1`` (equal) or ``0``; it exits at end of input.
It bounds nothing itself: the parent watches its CPU time and kills it. The
server exits when its parent does (the socket closes), and on Linux a child is
killed when the server exits (``PR_SET_PDEATHSIG``), so a killed reward worker
leaves no check running.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import Iterable
from typing import Any, TextIO

WARMUP_PAIRS = (
    ("$\\frac{1}{2}$", "0.5"),
    ("$x^2+2x+1$", "(x+1)^2"),
    ("$\\{1,2\\}$", "\\{2,1\\}"),
    ("$[0, 1)$", "[0,1)"),
    ("$\\sqrt{2}\\pi$", "\\pi\\sqrt{2}"),
    ("$x=3$", "3"),
    ("$\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}$", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}"),
    ("$10\\%$", "0.1"),
    ("$\\sin(x)^2+\\cos(x)^2$", "1"),
)
"""Checked once by the fork server, so that forked children start with warm parsers."""

_PR_SET_PDEATHSIG = 1


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


def serve(requests: Iterable[str], answers: TextIO) -> None:
    """Answer each ``[gold, student]`` JSON line of ``requests`` with ``1`` or ``0`` on ``answers``."""
    for line in requests:
        try:
            gold, student = json.loads(line)
            equal = verify_inline(str(gold), str(student))
        except (ValueError, TypeError):
            equal = False
        answers.write("1\n" if equal else "0\n")
        answers.flush()


def main(argv: list[str]) -> None:
    """Set ``sys.path`` from ``argv[1]`` (JSON list), warm up, serve fork requests on socket ``argv[2]``."""
    sys.path[:] = [str(entry) for entry in json.loads(argv[1])]
    server = socket.socket(fileno=int(argv[2]))
    logging.disable(logging.WARNING)
    for gold, student in WARMUP_PAIRS:
        verify_inline(gold, student)
    gc.collect()
    gc.freeze()  # the collector leaves the warm heap alone, so children share its pages
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    server.sendall(b"ready\n")
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(server, 64, 2)
        except OSError:
            return
        if not message:
            return  # the parent closed the socket
        if len(fds) != 2:
            for fd in fds:
                os.close(fd)
            server.sendall(b"0\n")
            continue
        pid = os.fork()
        if pid == 0:
            server.close()
            _run_child(fds[0], fds[1], int(message.strip() or b"0"))
        for fd in fds:
            os.close(fd)
        server.sendall(f"{pid}\n".encode())


def _run_child(request_fd: int, answer_fd: int, niceness: int) -> None:
    """Body of a forked child: serve its pipes, then exit without the server's clean-up."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        _die_with_parent()
        if niceness > 0:
            os.nice(niceness)
        with (
            open(request_fd, encoding="utf-8", errors="surrogatepass") as requests,
            open(answer_fd, "w", encoding="utf-8") as answers,
        ):
            serve(requests, answers)
    finally:
        os._exit(0)


def _die_with_parent() -> None:
    """On Linux, have the kernel kill this process when its parent (single-threaded) exits."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
