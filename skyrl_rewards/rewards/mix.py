"""A reward mix: registry names with weights and parameters, scored on one sample.

The mix is what a pool worker, the SkyRL env (in-process mode) and the CLI
hold. It is built from the ``rewards`` mapping of the configs::

    rewards:
      accuracy: {weight: 1.0}
      format:   {weight: 0.5}
      length:   {weight: 0.2, max_len: 1024}

A *sample* is a mapping with ``completion`` (str or message list),
``solution`` (the ground truth) and any dataset columns for this one row
(``image_path``, ``image_grid_thw``, ``accu_reward_method``, ...).

:meth:`RewardMix.score` never raises for what a model wrote or for a bad row:
every component is caught and turned into a :class:`ComponentScore` with a
status (see :mod:`skyrl_rewards.rewards.contract.result`).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_rewards.rewards.contract.component_base import Component
from skyrl_rewards.rewards.contract.result import ComponentScore, RewardResult, Status
from skyrl_rewards.rewards.registry import build_component


@dataclass(frozen=True)
class RewardSpec:
    """One entry of a mix: a registry name, its weight and its parameters."""

    name: str
    weight: float = 1.0
    params: Mapping[str, Any] = field(default_factory=dict)


class RewardMix:
    """Weighted reward components built once and applied to samples.

    >>> mix = RewardMix.from_config({"format": {"weight": 1.0}})
    >>> mix.score({"completion": "<think>x</think><answer>1</answer>", "solution": "1"}).total
    1.0
    """

    def __init__(self, specs: list[RewardSpec]) -> None:
        if not specs:
            raise ValueError("rewards: the reward mix is empty; name at least one reward")
        self._specs = list(specs)
        self._components = {spec.name: build_component(spec.name, spec.params) for spec in specs}
        self.weights: dict[str, float] = {spec.name: float(spec.weight) for spec in specs}

    @classmethod
    def from_config(cls, rewards: Mapping[str, Any]) -> RewardMix:
        """Build from ``{name: {weight: w, <param>: value, ...}}`` (dict or omegaconf)."""
        if hasattr(rewards, "_metadata"):  # an omegaconf node
            from omegaconf import OmegaConf

            rewards = OmegaConf.to_container(rewards, resolve=True)  # type: ignore[assignment]
        if not isinstance(rewards, Mapping):
            raise ValueError(
                f"rewards: expected a mapping name -> {{weight, params}}, got {type(rewards).__name__}"
            )
        specs = []
        for name, entry in rewards.items():
            entry = dict(entry or {})
            weight = entry.pop("weight", 1.0)
            if not isinstance(weight, (int, float)) or isinstance(weight, bool):
                raise ValueError(f"rewards.{name}.weight: expected a number, got {weight!r}")
            specs.append(RewardSpec(name=str(name), weight=float(weight), params=entry))
        return cls(specs)

    @property
    def names(self) -> tuple[str, ...]:
        """Component names in config order."""
        return tuple(spec.name for spec in self._specs)

    def component(self, name: str) -> Component:
        """The built component ``name`` (``KeyError`` when the mix has none)."""
        return self._components[name]

    def lanes(self) -> frozenset[str]:
        """The model lanes any component of the mix may use (see ``models.lanes``)."""
        return frozenset().union(*(c.lanes() for c in self._components.values()))

    def lane(self, name: str, sample: Mapping[str, Any]) -> str | None:
        """The model lane that scores component ``name`` on ``sample``; ``None``: rules."""
        return self._components[name].lane(sample)

    def score_component(self, name: str, sample: Mapping[str, Any]) -> ComponentScore:
        """Score one component on one sample; never raises."""
        return self._components[name].score(sample)

    def score(self, sample: Mapping[str, Any]) -> RewardResult:
        """Score every component on ``sample`` and return the weighted result."""
        start = time.perf_counter()
        scores = {name: self.score_component(name, sample) for name in self.names}
        return RewardResult.from_components(scores, self.weights, time.perf_counter() - start)

    def work_key(self, name: str, sample: Mapping[str, Any]) -> Hashable | None:
        """A key equal for two samples whose component ``name`` must score the same.

        ``None`` means the work cannot be shared (the key would cost as much as
        the work). Used by the pool to compute identical work once.
        """
        return self._components[name].work_key(sample)

    def fallback_result(self, status: Status, message: str, fallback: float) -> RewardResult:
        """A result whose every component has ``status`` and the ``fallback`` value."""
        scores = {name: ComponentScore(fallback, status, message) for name in self.names}
        return RewardResult.from_components(scores, self.weights)
