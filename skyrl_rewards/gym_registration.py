"""``import skyrl_rewards`` registers the skyrl-gym env id ``skyrl_rewards``, without importing skyrl-gym.

Like ``import tau_bench_env`` (which registers its env), importing the package makes
``skyrl_gym.make("skyrl_rewards", ...)`` work, in either import order:

- skyrl-gym already imported: the id is registered now;
- otherwise: right after skyrl-gym's first import, by a one-shot finder on
  ``sys.meta_path`` that lets the normal import run and removes itself when it fires.

A process that never imports skyrl-gym never loads it (nor Ray, nor SkyRL): the package
facade stays light (``tests/test_layers.py``). An id already held by a different env is
left to it, with a warning (raising here would fail someone else's ``import skyrl_gym``);
importing :mod:`skyrl_rewards.train.env` or SkyRL's entrypoint task
(``register_installed_envs``) then raises ``EnvIdTakenError``, as for any id conflict.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import logging
import sys
from collections.abc import Callable
from typing import Any

ENV_ID = "skyrl_rewards"
ENTRY_POINT = "skyrl_rewards.train.env:SkyRLRewardEnv"
GYM = "skyrl_gym"
_PENDING: list[Callable[[], None]] = []
"""What runs right after skyrl-gym's first import (:func:`when_gym_loads`), in order."""


def register() -> None:
    """Register ``skyrl_rewards`` with skyrl-gym unless another env holds it (imports skyrl-gym).

    skyrl-gym's own registry, not :mod:`skyrl_rewards.train.registration`: this runs at the
    end of skyrl-gym's first import, which that module may be in the middle of.
    """
    from skyrl_gym.envs.registration import register as gym_register
    from skyrl_gym.envs.registration import registry

    spec = registry.get(ENV_ID)
    if spec is None:
        gym_register(id=ENV_ID, entry_point=ENTRY_POINT)
    elif spec.entry_point != ENTRY_POINT:
        logging.getLogger(__name__).warning(
            "skyrl-gym env id %r is held by %r; %s is not registered under it",
            ENV_ID,
            spec.entry_point,
            ENTRY_POINT,
        )


class _RegisterAfterGymImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself; wraps skyrl-gym's loader so the pending callbacks run after it."""

    def __init__(self) -> None:
        self._finding = False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != GYM or self._finding:
            return None
        self._finding = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self._finding = False
        if spec is None or spec.loader is None:
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        exec_module = spec.loader.exec_module

        def exec_then_register(module: Any) -> None:
            exec_module(module)
            while _PENDING:
                _PENDING.pop(0)()

        spec.loader.exec_module = exec_then_register  # type: ignore[method-assign]
        return spec


def when_gym_loads(callback: Callable[[], None]) -> None:
    """Run ``callback`` now if skyrl-gym is imported, else right after its first import.

    A deferred callback runs inside that import: it must not raise (a warning
    instead), or it would fail someone else's ``import skyrl_gym``.
    """
    if GYM in sys.modules:
        callback()
        return
    _PENDING.append(callback)
    if not any(isinstance(f, _RegisterAfterGymImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterGymImport())


def register_when_gym_loads() -> None:
    """Register now if skyrl-gym is imported, else once it is (see the module docstring)."""
    when_gym_loads(register)
