"""The map from a row's predicted boxes to its original pixels, counting the boxes it clamps.

:func:`~skyrl_rewards.rewards.geometry.box_formats.row_converter` builds one
:class:`BoxConverter` per row and answer; a reward scores with it, then notes
on its score how many boxes it clamped to their relative grid
(:func:`note_clamped`): Qwen3-VL writes past 1000 at times
(QwenLM/Qwen3-VL#1741), and the count shows how often.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from skyrl_rewards.rewards.contract.result import ComponentScore
from skyrl_rewards.rewards.geometry.boxes import Box


class BoxFormat(Protocol):
    """What a converter reads of a :class:`~skyrl_rewards.rewards.geometry.box_formats.BoxFormat`."""

    def clamped(self, box: Box) -> Box: ...

    def to_original(
        self, box: Box, image_size: tuple[int, int], resized: tuple[int, int] | None = None
    ) -> Box: ...


class BoxConverter:
    """The map from a row's predicted boxes to its original pixels, counting the boxes it clamps.

    A call maps one box (a point as ``(x, y, x, y)``) with ``fmt``'s
    ``to_original``; a relative box is first clamped to its grid (``fmt``'s
    ``clamped``), and :attr:`clamped` counts the calls whose box that changed.

    >>> from skyrl_rewards.rewards.geometry.box_formats import FAMILIES
    >>> convert = BoxConverter(FAMILIES["qwen3_vl"], (200, 100))
    >>> convert((0, 0, 1004, 500)), convert.clamped
    ((0.0, 0.0, 200.0, 50.0), 1)
    """

    def __init__(
        self, fmt: BoxFormat, size: tuple[int, int], resized: tuple[int, int] | None = None
    ) -> None:
        self.fmt = fmt
        self.size = size
        self.resized = resized
        self.clamped = 0

    def __call__(self, box: Box) -> Box:
        inside = self.fmt.clamped(box)
        if inside != tuple(box):
            self.clamped += 1
        return self.fmt.to_original(inside, self.size, self.resized)


def note_clamped(score: ComponentScore, convert: BoxConverter | None) -> ComponentScore:
    """``score`` with the count of boxes ``convert`` clamped (``ComponentScore.clamped``); its value unchanged."""
    if convert is None or not convert.clamped:
        return score
    return dataclasses.replace(score, clamped=convert.clamped)
