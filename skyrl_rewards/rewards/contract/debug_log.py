"""SPEC's debug sink: with ``DEBUG_MODE=true`` and ``LOG_PATH`` set, append contents and rewards.

Kept outside the reward maths: the batch functions call :func:`log_rewards`
after scoring. Logging never raises and never changes a reward.
"""

from __future__ import annotations

import datetime
import logging
import os
import threading
from collections.abc import Sequence

_LOCK = threading.Lock()
_logger = logging.getLogger(__name__)


def debug_log_path() -> str | None:
    """The file to append to, or ``None`` when debug logging is off.

    ``LOG_PATH`` with a trailing ``.txt`` replaced by ``_format.txt``, or
    ``_format.txt`` appended when it has no ``.txt``.
    """
    if os.environ.get("DEBUG_MODE", "").lower() != "true":
        return None
    log_path = os.environ.get("LOG_PATH", "")
    if not log_path:
        return None
    if log_path.endswith(".txt"):
        return log_path[: -len(".txt")] + "_format.txt"
    return log_path + "_format.txt"


def log_rewards(reward_name: str, contents: Sequence[str], rewards: Sequence[float | None]) -> None:
    """Append one entry per content to the debug file, if debug logging is on."""
    path = debug_log_path()
    if path is None:
        return
    stamp = datetime.datetime.now().strftime("%d-%H-%M-%S-%f")
    lines = [
        f"------------- {stamp} {reward_name}: {reward} -------------\nContent: {content}\n"
        for content, reward in zip(contents, rewards, strict=False)
    ]
    try:
        with _LOCK, open(path, "a", encoding="utf-8", errors="replace") as sink:
            sink.writelines(lines)
    except OSError as error:
        _logger.warning("debug log %s not written: %s", path, error)
