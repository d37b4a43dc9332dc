"""Ctrl-C for the command line: answered at once; a second Ctrl-C ends the command at once.

The first Ctrl-C prints one line at once, when stopping waits for anything:
the command is stopping, what it waits for (the start-up phase under way,
:mod:`skyrl_rewards.pool.phases`, then the clean-up: the pool's workers and
this command's local Ray), and that a second Ctrl-C ends it now. It then raises ``KeyboardInterrupt``, and
the command stops what it started and reports. While Ray starts
(:func:`skyrl_rewards.pool.cluster.sigint_held` asks :meth:`StopOnCtrlC.hold`),
the ``KeyboardInterrupt`` waits until ``ray.init`` returns: Ray cannot be
stopped half way.

A second Ctrl-C kills every process this command started (Ray's GCS,
raylet, workers and agents are its descendants) and exits with 130 at once.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from skyrl_rewards.pool.phases import current_phase

INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as a shell reports it."""


class StopOnCtrlC:
    """A SIGINT handler: the first Ctrl-C stops the command cleanly, the second ends it now.

    Python runs a signal handler only between bytecodes of the main thread, so
    a main thread blocked in C (``ray.init`` waits in Ray's C++ code for up to
    20 s) would answer late. The answer therefore comes from a thread woken
    through :func:`signal.set_wakeup_fd`, which the C-level handler writes to
    at once: it prints the line, and on the second Ctrl-C ends the process.
    The Python-level handler (:meth:`__call__`) only raises ``KeyboardInterrupt``,
    once, when the main thread gets to run it.
    """

    def __init__(self, command: str, stream: TextIO | None = None) -> None:
        self.command = command
        self.stream = stream
        self.presses = 0
        self.cleanup = ""
        """What stopping waits for, set by the command once it has started something."""
        self._held: str | None = None
        self._pending = False
        self._raised = False

    def __call__(self, signum: int, frame: object) -> None:
        if self._raised:
            return  # a later Ctrl-C: the watcher thread has ended the process, or is about to
        if self._held is not None:
            self._pending = True
            return
        self._raised = True
        raise KeyboardInterrupt

    def pressed(self) -> None:
        """One Ctrl-C, seen by the watcher thread: the first is answered, the second ends now."""
        self.presses += 1
        if self.presses > 1:
            self.end_now()
        under_way = self._held or current_phase()
        waits = [f"{under_way} to end" if under_way else "", self.cleanup]
        waiting = " and ".join(part for part in waits if part)
        if waiting:  # else the command ends at once: its own line says so
            self._say(f"Ctrl-C: stopping, waiting for {waiting}; press Ctrl-C again to end at once")

    @contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Inside the block a first Ctrl-C is answered and delivered when the block ends."""
        self._held = what
        try:
            yield
        finally:
            self._held = None
        if self._pending:
            self._pending = False
            self._raised = True
            raise KeyboardInterrupt

    def end_now(self) -> None:
        """Kill every descendant process (Ray's included) and exit 130 without clean-up."""
        killed = kill_descendants()
        self._say(
            f"Ctrl-C again: ended at once ({killed} started processes killed); "
            "written rows stay written"
        )
        os._exit(INTERRUPTED)

    def _say(self, text: str) -> None:
        stream = self.stream or sys.stderr
        stream.write(f"\nskyrl-rewards {self.command}: {text}\n")
        stream.flush()


@contextmanager
def ctrl_c_handled(handler: StopOnCtrlC) -> Iterator[None]:
    """Install ``handler`` for SIGINT inside the block (main thread only), the previous after it."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python delivers no signal here
        return
    woken, wake = socket.socketpair()
    wake.setblocking(False)
    previous_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
    previous = signal.signal(signal.SIGINT, handler)
    watcher = threading.Thread(
        target=_watch, args=(woken, handler), name="ctrl-c-watcher", daemon=True
    )
    watcher.start()
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.set_wakeup_fd(previous_fd)
        wake.close()  # the watcher reads the end of its input and returns
        watcher.join(timeout=1.0)
        woken.close()


def _watch(woken: socket.socket, handler: StopOnCtrlC) -> None:
    """Answer each SIGINT that the wake-up socket reports (one byte per signal)."""
    while True:
        try:
            data = woken.recv(64)
        except OSError:
            return
        if not data:
            return
        for signum in data:
            if signum == signal.SIGINT:
                handler.pressed()


def descendants(pid: int) -> list[int]:
    """Process ids of every live descendant of ``pid`` (Linux ``/proc``; elsewhere none)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def kill_descendants() -> int:
    """SIGKILL every descendant of this process; the number killed."""
    killed = 0
    for pid in descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            continue
    return killed
