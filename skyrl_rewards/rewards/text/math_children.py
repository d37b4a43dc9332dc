"""The processes a guarded math check runs in: the fork server, its children, and their pool.

:class:`ChildPool` keeps this process's children (at most ``size`` busy, idle
ones per niceness) and forks new ones from the math fork server
(:mod:`~skyrl_rewards.rewards.text.math_child`, started by :func:`server_command`
isolated from the working directory). A child's check is bounded by its own CPU
time (``/proc/<pid>/stat``), with the contention margin, the starvation net
(:data:`STARVED_S`) and the wall net (:func:`wall_bound_s`); a child that times out
is killed. What a check means (the outcome, the record of timed-out pairs, first
passes, priorities) is :mod:`~skyrl_rewards.rewards.text.math_check`'s.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from skyrl_rewards.rewards.text import math_child

CHILD_START_TIMEOUT_S = 120.0
"""How long the fork server may take to import math-verify and warm up (slow on a loaded machine)."""


FORK_TIMEOUT_S = 30.0
"""How long the fork server may take to fork a child (milliseconds when it is healthy)."""


WALL_SAFETY_FACTOR = 100.0


WALL_SAFETY_MIN_S = 300.0


STARVED_S = 30.0
"""A child whose CPU time does not move for this long (wall) is given up on."""


CHILD_WAIT_S = 600.0
"""How long a call waits for a free child before giving up (status timeout, not remembered)."""


CONTENDED_RATIO = 0.8
"""Below this CPU/wall ratio, a check that ran out of CPU time is taken to have waited for a CPU.

A check computes and nothing else (no reads, no writes until it answers), so
its CPU/wall ratio is about 1.0 when a CPU is free for it and drops as the
machine is oversubscribed: about 0.33 with two busy processes on its core.
"""


_POLL_S = 0.02


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class MathStatus(str, Enum):
    """How a symbolic check ended."""

    EQUAL = "equal"
    NOT_EQUAL = "not_equal"
    TIMEOUT = "timeout"
    TOO_COMPLEX = "too_complex"
    CRASHED = "crashed"


def wall_bound_s(timeout_s: float) -> float:
    """The wall-clock safety net of a guarded check with a CPU limit of ``timeout_s``.

    >>> wall_bound_s(3.0)
    300.0
    """
    return max(WALL_SAFETY_MIN_S, WALL_SAFETY_FACTOR * timeout_s)


class _ChildFailed(Exception):
    """The fork server or a child could not start, died, or stopped answering."""


@dataclass(frozen=True)
class Attempt:
    """How one check in a child ended, and what it cost."""

    outcome: MathStatus
    on_limit: bool
    """For a TIMEOUT: decided on the limit (remembered), not by a safety net or a wait."""
    cpu_s: float | None
    """The child's CPU seconds for this check; ``None`` without ``/proc`` (or no child)."""
    wall_s: float
    extended: bool
    """The check reached its limit while it waited for a CPU, and went on with the margin."""


def server_command(socket_fd: int) -> list[str]:
    """The command that starts the math fork server on socket ``socket_fd``: isolated, with this ``sys.path``.

    Isolated mode (``-I``) keeps the working directory, the script's directory,
    ``PYTHONPATH`` and user site off the server's ``sys.path``; the server then
    takes this process's ``sys.path`` minus ``""`` and the working directory
    (which keeps user-site and ``PYTHONPATH`` installs working).
    """
    cwd = os.path.realpath(os.getcwd())
    paths = [p for p in sys.path if p and os.path.realpath(p) != cwd]
    return [sys.executable, "-I", str(Path(math_child.__file__)), json.dumps(paths), str(socket_fd)]


def _cpu_seconds(pid: int) -> float | None:
    """User plus system CPU time of process ``pid`` so far; ``None`` without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


def _read_line(sock: socket.socket, timeout_s: float) -> bytes:
    """One line from ``sock`` (without the newline); ``b""`` when it closed or stayed quiet."""
    sock.settimeout(timeout_s)
    data = b""
    try:
        while not data.endswith(b"\n"):
            part = sock.recv(64)
            if not part:
                return b""
            data += part
    except OSError:  # socket.timeout is an OSError
        return b""
    return data.strip()


class _Child:
    """One forked math child: its pid and the two ends of its pipes (see :mod:`math_child`)."""

    def __init__(self, pid: int, request_fd: int, answer_fd: int) -> None:
        self.pid = pid
        os.set_blocking(request_fd, False)  # a request past the pipe buffer never blocks a caller
        self._requests: int | None = request_fd
        self._answers = open(answer_fd, encoding="utf-8")
        self._pidfd: int | None = None
        if hasattr(os, "pidfd_open"):  # Linux: signals reach this process, never a reused pid
            try:
                self._pidfd = os.pidfd_open(pid)
            except OSError as error:
                self.kill()
                raise _ChildFailed(f"died at start: {error}") from error

    def alive(self) -> bool:
        if self._pidfd is not None:
            exited, _, _ = select.select([self._pidfd], [], [], 0)
            return not exited
        try:
            os.kill(self.pid, 0)
        except OSError:
            return False
        return True

    def check(
        self, gold: str, student: str, timeout_s: float, contended_timeout_s: float
    ) -> Attempt:
        """The child's answer and what it cost; the child is killed on a timeout.

        A check that reaches ``timeout_s`` of CPU time with a CPU/wall ratio
        under :data:`CONTENDED_RATIO` goes on up to ``contended_timeout_s``.
        Raises :class:`_ChildFailed` when the child died without answering.
        """
        start_cpu = _cpu_seconds(self.pid)
        start_wall = last_move = time.monotonic()
        last_cpu = start_cpu
        wall_limit = timeout_s if start_cpu is None else wall_bound_s(contended_timeout_s)
        extended = False

        def ended(outcome: MathStatus, on_limit: bool = False) -> Attempt:
            used = None if start_cpu is None else _cpu_seconds(self.pid)
            cpu_s = None if start_cpu is None or used is None else used - start_cpu
            return Attempt(outcome, on_limit, cpu_s, time.monotonic() - start_wall, extended)

        try:
            if not self._send(
                (json.dumps([gold, student]) + "\n").encode("utf-8", "surrogatepass")
            ):
                self.kill()
                return ended(MathStatus.TIMEOUT)
            while True:
                ready, _, _ = select.select([self._answers], [], [], _POLL_S)
                if ready:
                    break
                now = time.monotonic()
                used = None if start_cpu is None else _cpu_seconds(self.pid)
                if start_cpu is not None and used is not None:
                    if used - start_cpu > timeout_s:
                        waited = used - start_cpu < CONTENDED_RATIO * (now - start_wall)
                        if not (waited and timeout_s < contended_timeout_s):
                            attempt = ended(MathStatus.TIMEOUT, on_limit=True)
                            self.kill()
                            return attempt
                        timeout_s, extended = contended_timeout_s, True
                    if used != last_cpu:
                        last_cpu, last_move = used, now
                    elif now - last_move > STARVED_S:
                        self.kill()
                        return ended(MathStatus.TIMEOUT)
                if now - start_wall > wall_limit:
                    self.kill()
                    return ended(MathStatus.TIMEOUT, on_limit=start_cpu is None)
            line = self._answers.readline()
        except (OSError, ValueError) as error:
            self.kill()
            raise _ChildFailed(str(error)) from error
        if not line:
            self.kill()
            raise _ChildFailed("died mid-check")
        return ended(MathStatus.EQUAL if line.strip() == "1" else MathStatus.NOT_EQUAL)

    def _send(self, request: bytes) -> bool:
        """Write ``request`` to the child; ``False`` when it took none of it for :data:`STARVED_S`.

        Requests can be larger than a pipe's buffer (two answers of up to
        :data:`MAX_MATH_CHARS`), and a stopped child reads nothing.
        """
        sent = 0
        while sent < len(request):
            _, writable, _ = select.select([], [self._requests], [], STARVED_S)
            if not writable:
                return False
            sent += os.write(self._requests, request[sent:])  # type: ignore[arg-type]
        return True

    def close_inherited(self) -> None:
        """Close this process's copies of the pipes and pidfd (after a fork); signal nothing."""
        if self._requests is not None:
            with contextlib.suppress(OSError):
                os.close(self._requests)
            self._requests = None
        with contextlib.suppress(OSError):
            self._answers.close()
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None

    def kill(self) -> None:
        """Kill the child (the fork server's kernel-side reaping collects it) and close its pipes."""
        try:
            if self._pidfd is not None:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            else:
                os.kill(self.pid, signal.SIGKILL)
        except OSError:
            pass  # already gone
        self.close_inherited()


class _ForkServer:
    """This process's math fork server (:mod:`math_child`): started on first use, again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    def fork(self, niceness: int) -> _Child:
        """A new child, ``niceness`` steps nicer than the server. Raises :class:`_ChildFailed`."""
        with self._lock:
            if self._sock is not None:
                try:
                    return self._fork(self._sock, niceness)
                except _ChildFailed:
                    self._stop()  # the server died: start another once
            self._sock = self._start()
            try:
                return self._fork(self._sock, niceness)
            except _ChildFailed:
                self._stop()
                raise

    def close_inherited(self) -> None:
        """Close this process's copy of the socket (after a fork); the server keeps running."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        self._proc = None

    def stop(self) -> None:
        """Stop the server; its idle children see the end of their input, busy ones are killed."""
        with self._lock:
            self._stop()

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._proc = subprocess.Popen(
                server_command(theirs.fileno()),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except OSError as error:
            ours.close()
            raise _ChildFailed(f"cannot start the math fork server: {error}") from error
        finally:
            theirs.close()
        if _read_line(ours, CHILD_START_TIMEOUT_S) != b"ready":
            ours.close()
            self._stop()
            raise _ChildFailed("the math fork server did not start; is math-verify installed?")
        return ours

    def _fork(self, sock: socket.socket, niceness: int) -> _Child:
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        try:
            socket.send_fds(sock, [f"{niceness}\n".encode()], [request_read, answer_write])
            reply = _read_line(sock, FORK_TIMEOUT_S)
        except OSError:
            reply = b""
        finally:
            os.close(request_read)
            os.close(answer_write)
        if not reply.isdigit() or int(reply) <= 0:
            os.close(request_write)
            os.close(answer_read)
            raise _ChildFailed("the math fork server did not fork a child")
        return _Child(int(reply), request_write, answer_read)

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


class ChildPool:
    """Children shared by the threads of this process: one call per child, at most ``size`` busy.

    Idle children are kept per niceness; a child killed on a timeout is
    replaced by a fork of the server, which takes milliseconds.
    """

    def __init__(self, size: int) -> None:
        self._idle: dict[int, list[_Child]] = {}
        self._lock = threading.Lock()
        self._size = size
        self._slots = threading.BoundedSemaphore(size)
        self._server = _ForkServer()

    def check(
        self, gold: str, student: str, timeout_s: float, contended_timeout_s: float, niceness: int
    ) -> Attempt:
        """Check on an idle (or new) child; a child that dies is replaced once, then CRASHED.

        The wait for a free child does not count against ``timeout_s``; past
        :data:`CHILD_WAIT_S` it gives up (TIMEOUT, not decided on CPU time).
        """
        if not self._slots.acquire(timeout=CHILD_WAIT_S):
            return Attempt(MathStatus.TIMEOUT, False, None, CHILD_WAIT_S, False)
        try:
            for _ in range(2):
                try:
                    child = self._take(niceness)
                    attempt = child.check(gold, student, timeout_s, contended_timeout_s)
                except _ChildFailed:
                    continue
                if attempt.outcome is not MathStatus.TIMEOUT:  # a timed-out child is dead
                    self._put(child, niceness)
                return attempt
            return Attempt(MathStatus.CRASHED, False, None, 0.0, False)
        finally:
            self._slots.release()

    def _take(self, niceness: int) -> _Child:
        with self._lock:
            idle = self._idle.setdefault(niceness, [])
            while idle:
                child = idle.pop()
                if child.alive():
                    return child
                child.kill()
        return self._server.fork(niceness)

    def _put(self, child: _Child, niceness: int) -> None:
        with self._lock:
            idle = self._idle.setdefault(niceness, [])
            if len(idle) < self._size:
                idle.append(child)
                return
        child.kill()

    def abandon(self) -> None:
        """In a process forked from the owner: close the inherited ends, signal nothing.

        The server and children belong to the parent; a forked copy that used
        the same socket would read the parent's replies.
        """
        for child in (child for idle in self._idle.values() for child in idle):
            child.close_inherited()
        self._server.close_inherited()

    def close(self) -> None:
        """Stop every idle child and the fork server (children in use are killed with it)."""
        with self._lock:
            children = [child for idle in self._idle.values() for child in idle]
            self._idle = {}
        for child in children:
            child.kill()
        self._server.stop()
