"""Registering envs with skyrl-gym: by id and entry point, never silently replacing another env.

skyrl-gym keeps one global registry of env ids. SkyRL's generator builds
envs by id (``environment.env_class``), so an id taken by a different env
means training on the wrong env. :func:`register_env` registers an id, does
nothing when the same entry point already holds it, and raises
:class:`EnvIdTakenError` naming both entry points when a different one does.
:func:`register_installed_envs` does that for every env installed packages
declare in the ``skyrl_gym.envs`` entry-point group (this project declares
``skyrl_rewards`` and ``tau_bench``); SkyRL's entrypoint task calls it once.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from skyrl_gym.envs.registration import register, registry

ENTRY_POINT_GROUP = "skyrl_gym.envs"


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


def register_installed_envs(group: str = ENTRY_POINT_GROUP) -> list[str]:
    """Register every env that installed packages declare in the entry-point ``group``.

    skyrl-gym 0.4 does not read entry points itself. Returns the ids found,
    in entry-point order; raises :class:`EnvIdTakenError` on a conflict.
    """
    found = []
    for entry in entry_points(group=group):
        register_env(entry.name, entry.value)
        found.append(entry.name)
    return found
