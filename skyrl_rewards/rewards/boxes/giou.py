"""Continuous-coordinate box overlap: IoU, Generalized IoU, and the ``giou`` REC reward.

Unlike :func:`~skyrl_rewards.rewards.geometry.boxes.iou` (VLM-R1's pixel
convention, ``x2 - 1`` and ``+ 1``), the overlaps here treat a box as the
continuous rectangle ``[x1, x2] x [y1, y2]``, as the anchors of these rewards
do (NeMo-RL's ``bbox_giou_reward``, Perception-R1's ``compute_iou``,
Visual-RFT's ``calculate_iou``).

The ``giou`` reward reads one predicted box (the first ``[x1, y1, x2, y2]``
of numbers in the answer span, like ``iou``) against one ground-truth box (a
JSON box in the solution's answer span) and shapes the overlap by ``mode``:

- ``giou``: GIoU in [-1, 1], unmapped and unclamped, as NeMo-RL returns it;
- ``giou_unit``: ``(GIoU + 1) / 2`` in [0, 1] (Visual-RFT's LISA reward is
  ``GIoU + 1`` in [0, 2]: the same shape, halved);
- ``iou_squared``: IoU² in [0, 1], Perception-R1's ``pr1_grounding_reward``.

No box, a box without area and overflowing coordinates score the mode's
floor (-1.0 for ``giou``, 0.0 otherwise): a non-answer never beats an answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.boxes.rec import ground_truth_box
from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.geometry.box_formats import BoxComponent, BoxFormatChoice, row_converter
from skyrl_rewards.rewards.geometry.boxes import Box, as_box, predicted_box
from skyrl_rewards.rewards.geometry.converter import note_clamped

GIOU_MODES = ("giou", "giou_unit", "iou_squared")
"""Shapes of the ``giou`` reward (see the module docstring)."""

MODE_FLOOR = {"giou": -1.0, "giou_unit": 0.0, "iou_squared": 0.0}
"""Each mode's least value: what no box, or a box without area, scores."""


def check_giou_mode(mode: Any) -> str:
    """``mode`` when it is one of :data:`GIOU_MODES`, else ``ValueError`` naming ``mode``.

    >>> check_giou_mode("iou_squared")
    'iou_squared'
    """
    if mode not in GIOU_MODES:
        raise ValueError(f"mode: expected one of {', '.join(GIOU_MODES)}, got {mode!r:.80}")
    return mode


def _valid(box: Sequence[float]) -> Box | None:
    """``box`` as a finite box with positive width and height, else ``None``."""
    checked = as_box(box)
    if checked is None or checked[2] <= checked[0] or checked[3] <= checked[1]:
        return None
    return checked


def box_iou(box1: Sequence[float], box2: Sequence[float]) -> float:
    """IoU in [0, 1] of two continuous boxes; 0.0 when either is malformed or has no area.

    >>> box_iou([0, 0, 10, 10], [5, 0, 15, 10])
    0.3333333333333333
    """
    a, b = _valid(box1), _valid(box2)
    if a is None or b is None:
        return 0.0
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(
        0.0, min(a[3], b[3]) - max(a[1], b[1])
    )
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    if not (union > 0 and math.isfinite(union) and math.isfinite(inter)):
        return 0.0
    return min(1.0, max(0.0, inter / union))


def generalized_iou(box1: Sequence[float], box2: Sequence[float]) -> float | None:
    """GIoU in [-1, 1]: IoU minus the share of the enclosing box that the union leaves empty.

    ``None`` when either box is malformed, has no area or overflows a float.

    >>> generalized_iou([0, 0, 10, 10], [20, 0, 30, 10])
    -0.3333333333333333
    """
    a, b = _valid(box1), _valid(box2)
    if a is None or b is None:
        return None
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(
        0.0, min(a[3], b[3]) - max(a[1], b[1])
    )
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    hull = (max(a[2], b[2]) - min(a[0], b[0])) * (max(a[3], b[3]) - min(a[1], b[1]))
    if not all(math.isfinite(v) for v in (inter, union, hull)) or not union > 0:
        return None
    value = inter / union - (hull - union) / hull
    return min(1.0, max(-1.0, value)) if math.isfinite(value) else None


def overlap_reward(box: Sequence[float], gt_box: Sequence[float], mode: str = "giou") -> float:
    """The ``mode``-shaped overlap of ``box`` with ``gt_box`` (see :data:`GIOU_MODES`).

    Range: [-1, 1] for ``giou``, [0, 1] otherwise; the mode's floor for a
    malformed box or one without area.

    >>> overlap_reward([0, 0, 10, 10], [5, 0, 15, 10], "iou_squared")
    0.1111111111111111
    """
    check_giou_mode(mode)
    if mode == "iou_squared":
        return box_iou(box, gt_box) ** 2
    value = generalized_iou(box, gt_box)
    if value is None:
        return MODE_FLOOR[mode]
    return value if mode == "giou" else (value + 1.0) / 2.0


def giou_score(
    content: str,
    gt_box: Box,
    mode: str = "giou",
    *,
    convert: Callable[[Box], Box] | None = None,
) -> ComponentScore:
    """:func:`overlap_reward` of the first box in the answer span of ``content`` with ``gt_box``.

    ``convert`` maps the predicted box to original pixels first (``None``: as
    written). No box in the answer: the mode's floor, status ``unparseable``.

    >>> giou_score("<answer>[0, 0, 10, 10]</answer>", (20.0, 0.0, 30.0, 10.0)).value
    -0.3333333333333333
    """
    check_giou_mode(mode)
    box = predicted_box(content) if isinstance(content, str) else None
    if box is None:
        return ComponentScore(
            MODE_FLOOR[mode], Status.UNPARSEABLE, "no [x1, y1, x2, y2] box in the answer"
        )
    if convert is not None:
        box = convert(box)
    return ComponentScore(overlap_reward(box, gt_box, mode))


def giou(content: str, sol: str, mode: str = "giou") -> float:
    """The ``giou`` reward of ``content`` against the box in ``sol``, boxes compared as written.

    Range: [-1, 1] for ``mode="giou"``, [0, 1] for ``giou_unit`` and
    ``iou_squared``. Raises ``ValueError`` naming ``solution`` when ``sol``
    holds no box with area, naming ``mode`` for an unknown mode.

    >>> giou("<answer>[0, 0, 10, 10]</answer>", "<answer>[0, 0, 10, 10]</answer>")
    1.0
    """
    return giou_score(content, ground_truth_box(sol), mode).value


def giou_sample_score(
    content: str,
    sol: Any,
    columns: Mapping[str, Any],
    box_format: BoxFormatChoice,
    mode: str = "giou",
) -> ComponentScore:
    """:func:`giou_score` for one dataset row, the box converted as the row's format says.

    Raises ``ValueError`` naming the field for a bad ground truth, an unknown
    ``box_format``, a bad or mismatched grid, or a missing image a relative
    format needs (as ``iou`` does).
    """
    gt_box = ground_truth_box(sol)
    convert = row_converter(columns, box_format.for_row(columns))
    return note_clamped(giou_score(content, gt_box, mode, convert=convert), convert)


class Giou(BoxComponent):
    """REC overlap of the predicted box shaped by ``mode`` (see :mod:`~skyrl_rewards.rewards.boxes.giou`).

    ``giou`` (NeMo-RL, [-1, 1]), ``giou_unit`` ((GIoU + 1) / 2) or
    ``iou_squared`` (Perception-R1). Continuous coordinates; the box converted
    from the row's box format like ``iou`` (default ``qwen2_5_vl``).
    """

    name = "giou"

    def __init__(self, mode: str = "giou", **box_params: Any) -> None:
        self.mode = check_giou_mode(mode)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        return giou_sample_score(content, solution, sample, self.box_format, self.mode)
