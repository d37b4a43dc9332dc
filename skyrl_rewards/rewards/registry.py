"""Registry: config names to reward components and to TRL-style batch reward functions.

Names: ``accuracy``, ``iou``, ``detection``, ``coco_map`` (COCO AP, one of
VLM-R1's mAP methods for every row), ``length`` (cosine shaping with the
accuracy it depends on), ``repetition``, ``format``, ``format_rec``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from skyrl_rewards.rewards.components import (
    Accuracy,
    CocoMap,
    Component,
    Detection,
    Format,
    FormatRec,
    Iou,
    Length,
    Repetition,
)

COMPONENTS: dict[str, type[Component]] = {
    "accuracy": Accuracy,
    "iou": Iou,
    "detection": Detection,
    "coco_map": CocoMap,
    "length": Length,
    "repetition": Repetition,
    "format": Format,
    "format_rec": FormatRec,
}


def build_component(name: str, params: Mapping[str, Any] | None = None) -> Component:
    """The component registered as ``name``, built with ``params``.

    Raises ``ValueError`` naming the reward for an unknown name or parameter.

    >>> build_component("format").name
    'format'
    """
    if name not in COMPONENTS:
        raise ValueError(
            f"rewards.{name}: unknown reward; registered rewards: {', '.join(COMPONENTS)}"
        )
    try:
        return COMPONENTS[name](**dict(params or {}))
    except TypeError as error:
        raise ValueError(f"rewards.{name}: bad parameters {dict(params or {})}: {error}") from error
    except ValueError as error:
        raise ValueError(f"rewards.{name}: {error}") from error
