"""Registering envs with skyrl-gym: by id and entry point, never silently replacing another env.

skyrl-gym keeps one global registry of env ids. SkyRL's generator builds
envs by id (``environment.env_class``), so an id taken by a different env
means training on the wrong env. :func:`register_env` registers an id, does
nothing when the same entry point already holds it, and raises
:class:`EnvIdTakenError` naming both entry points when a different one does.
:func:`register_installed_envs` does that for every env installed packages
declare in the ``skyrl_gym.envs`` entry-point group (this project declares
``skyrl_rewards`` and ``tau_bench_env``); SkyRL's entrypoint task calls it once.

Aliases (:func:`register_alias`, entry-point group ``skyrl_gym.env_aliases``) are
ids an env answers to only while no other env holds them. This project's
``tau_bench`` is one: SkyRL's own tau-bench env (SkyRL PR #1853) registers
``tau_bench`` in skyrl-gym; where it does, ``tau_bench`` is SkyRL's env and this
project's stays reachable as ``tau_bench_env`` (docs/tau_bench_env.md).
"""

from __future__ import annotations

import logging
from importlib.metadata import entry_points

from skyrl_gym.envs.registration import register, registry

ENTRY_POINT_GROUP = "skyrl_gym.envs"
ALIAS_GROUP = "skyrl_gym.env_aliases"

logger = logging.getLogger(__name__)


class EnvIdTakenError(ValueError):
    """A skyrl-gym env id is already registered to a different entry point."""


def register_env(env_id: str, entry_point: str) -> None:
    """Register ``entry_point`` (``"pkg.module:Class"``) under ``env_id`` with skyrl-gym.

    A no-op when ``env_id`` already names the same entry point. Raises
    :class:`EnvIdTakenError` when it names another one.

    >>> register_env("skyrl_rewards", "skyrl_rewards.train.env:SkyRLRewardEnv")
    """
    spec = registry.get(env_id)
    if spec is None:
        register(id=env_id, entry_point=entry_point)
        return
    if spec.entry_point != entry_point:
        raise EnvIdTakenError(
            f"skyrl-gym env id {env_id!r} is already registered to {_describe(spec.entry_point)}; "
            f"{entry_point} would replace it. Choose one: install or import only the package whose "
            f"env you train with, or register this one under a free id "
            f"(register_env('my_{env_id}', {entry_point!r})) and set environment.env_class to it"
        )


def _describe(entry_point: object) -> str:
    if isinstance(entry_point, str):
        return entry_point
    return f"{getattr(entry_point, '__module__', '?')}:{getattr(entry_point, '__qualname__', entry_point)}"


def register_alias(env_id: str, entry_point: str) -> bool:
    """Register ``entry_point`` under ``env_id`` unless a different env holds that id.

    Returns whether ``env_id`` names ``entry_point`` afterwards. An id held by
    another env is left to it (logged at info level), never replaced.
    """
    spec = registry.get(env_id)
    if spec is None:
        register(id=env_id, entry_point=entry_point)
        return True
    if spec.entry_point == entry_point:
        return True
    logger.info(
        "skyrl-gym env id %r is %s's; %s keeps its own id only",
        env_id,
        _describe(spec.entry_point),
        entry_point,
    )
    return False


def register_installed_envs(
    group: str = ENTRY_POINT_GROUP, alias_group: str = ALIAS_GROUP
) -> list[str]:
    """Register every env that installed packages declare in the entry-point ``group``.

    Then every alias of ``alias_group`` that is free (:func:`register_alias`).
    skyrl-gym 0.4 does not read entry points itself. Returns the ids registered,
    in entry-point order, envs first; raises :class:`EnvIdTakenError` on a
    conflict over an env's own id.
    """
    found = []
    for entry in entry_points(group=group):
        register_env(entry.name, entry.value)
        found.append(entry.name)
    for entry in entry_points(group=alias_group):
        if register_alias(entry.name, entry.value):
            found.append(entry.name)
    return found
