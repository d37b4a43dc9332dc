"""Ctrl-C for the command line: answered at once; a second Ctrl-C ends the command at once.

The first Ctrl-C prints one line at once, when stopping waits for anything:
the command is stopping, what it waits for (the start-up phase under way,
:mod:`skyrl_rewards.pool.phases`, then the clean-up: the pool's workers and
this command's local Ray), and that a second Ctrl-C ends it now. It then raises ``KeyboardInterrupt``, and
the command stops what it started and reports.

While Ray starts (:func:`skyrl_rewards.pool.cluster.sigint_held` asks
:meth:`StopOnCtrlC.hold`) nothing can be stopped cleanly: ``ray.init`` cannot
be interrupted half way, and waiting for it took 6-34 s (it brings up the
GCS, the raylet and its agents, then ``ray.shutdown`` takes them down again).
A first Ctrl-C there ends the processes the command started and exits with
130 at once, saying what the command leaves (:attr:`StopOnCtrlC.ended`):
before Ray has started nothing has been scored or written.

A second Ctrl-C kills every process this command started (Ray's GCS,
raylet, workers and agents are its descendants) and exits with 130 at once.
Either way no process is left: this process adopts the ones whose parent was
killed (Linux's child subreaper), and they are killed too.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from skyrl_rewards.pool.phases import current_phase

INTERRUPTED = 130
"""Exit code after Ctrl-C (128 + SIGINT), as a shell reports it."""
SETTLE_S = 3.0
"""Longest :func:`end_descendants` keeps killing processes that appear meanwhile."""
_PR_SET_CHILD_SUBREAPER = 36


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
        self.ended = f"skyrl-rewards {command}: interrupted (Ctrl-C)"
        """The command's last line when a Ctrl-C inside a hold ends it (what it leaves then)."""
        self._held: str | None = None
        self._pending = False
        self._raised = False
        self._ending = False
        self._lock = threading.Lock()

    def __call__(self, signum: int, frame: object) -> None:
        if self._raised:
            return  # a later Ctrl-C: the watcher thread has ended the process, or is about to
        if self._held is not None:
            self._pending = True
            return
        self._raised = True
        raise KeyboardInterrupt

    def pressed(self) -> None:
        """One Ctrl-C, seen by the watcher thread: the first is answered (inside a hold: the
        command ends now, :meth:`end_held`), the second ends now."""
        self.presses += 1
        if self.presses > 1:
            self.end_now()
        with self._lock:
            held = self._held
            self._ending = held is not None
        if held is not None:
            self.end_held(held)
        under_way = current_phase()
        waits = [f"{under_way} to end" if under_way else "", self.cleanup]
        waiting = " and ".join(part for part in waits if part)
        if waiting:  # else the command ends at once: its own line says so
            self._say(f"Ctrl-C: stopping, waiting for {waiting}; press Ctrl-C again to end at once")

    @contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Inside the block (``what``: something that cannot be stopped half way) a first
        Ctrl-C ends the command at once (:meth:`end_held`); the main thread, should the block
        end meanwhile, waits there for the end. One the watcher did not see is delivered as
        ``KeyboardInterrupt`` when the block ends."""
        self._held = what
        try:
            yield
        finally:
            with self._lock:
                self._held = None
                ending = self._ending
            if ending:
                threading.Event().wait()  # the watcher thread is ending the process
        if self._pending:
            self._pending = False
            self._raised = True
            raise KeyboardInterrupt

    def end_now(self) -> None:
        """Kill every descendant process (Ray's included) and exit 130 without clean-up."""
        _quiet_threads()
        killed = end_descendants()
        self._say(
            f"Ctrl-C again: ended at once ({killed} started processes killed); "
            "written rows stay written"
        )
        _exit()

    def end_held(self, held: str) -> None:
        """Inside a hold: kill every descendant (what ``held`` has started so far), print
        :attr:`ended` and exit 130."""
        try:
            self._say(
                f"Ctrl-C: stopping; {held} cannot be stopped half way, so the processes it "
                "started are ended"
            )
            _quiet_threads()
            end_descendants()
            (self.stream or sys.stderr).write(f"{self.ended}\n")
        finally:
            _exit()

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


def _quiet_threads() -> None:
    """The process is ending on purpose: a thread that fails because a killed process went
    away (Ray's ``ray_listen_error_messages``, subscribed to the GCS) ends without printing a
    traceback over the command's last line."""
    threading.excepthook = lambda args: None


def _exit() -> None:
    """Flush what the command printed and exit 130 now, from any thread."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more to say
            continue
    os._exit(INTERRUPTED)


def descendants(pid: int) -> list[int]:
    """Process ids of every live (not zombie) descendant of ``pid`` (Linux ``/proc``;
    elsewhere none)."""
    children: dict[int, list[tuple[int, bool]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append((int(stat.parent.name), fields[0] != "Z"))
    found: list[int] = []
    stack = [pid]
    while stack:
        for child, live in children.get(stack.pop(), []):
            if live:
                found.append(child)
            stack.append(child)
    return found


def _adopt_orphans() -> None:
    """Have this process adopt its descendants whose parent dies (Linux's child subreaper),
    so that :func:`descendants` still finds them; elsewhere nothing."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def end_descendants(*, settle_s: float = SETTLE_S) -> int:
    """SIGKILL every descendant of this process, again until none is left (one started, or
    orphaned, meanwhile), for at most ``settle_s``; the number killed."""
    _adopt_orphans()
    killed: set[int] = set()
    deadline = time.monotonic() + settle_s
    while (pids := descendants(os.getpid())) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                continue
        time.sleep(0.02)
    return len(killed)
