"""The child process behind the ``subprocess`` math guard (see :mod:`skyrl_rewards.rewards.math_check`).

Protocol on stdin/stdout, one JSON line each way: the parent writes
``[gold, student]``, the child answers ``1`` (equal) or ``0``. It writes
``ready`` once its imports are done, and exits at end of input.
"""

from __future__ import annotations

import json
import logging
import sys

from skyrl_rewards.rewards.math_check import verify_inline


def main() -> None:
    """Serve checks until stdin closes."""
    logging.disable(logging.WARNING)
    import math_verify  # noqa: F401  (import before announcing readiness)

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
    main()
