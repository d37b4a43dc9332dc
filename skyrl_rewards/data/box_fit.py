"""Does a row's box data fit its declared box format? The checks ``skyrl-rewards check`` adds.

A wrong box format never raises while scoring: a Qwen3-VL answer on the
0-1000 grid read as original pixels is just a poor IoU. These checks find
the rows where the numbers say the format is wrong:

- a ground-truth box that lies outside its image (ground truths are in
  original-image pixels, whatever the policy's format);
- a reference ``completion`` whose box, read in the declared format, lies
  outside the image, or overlaps the ground truth poorly (IoU below 0.5)
  while another reading puts it on the ground truth (IoU 0.9 or more): the
  row names what fits. For a resized-pixel format, a resize under other
  pixel bounds (an engine's ``max_pixels``) is tried first: the family is
  right there and the fix is the bounds, so that is the hint, not another
  coordinate system that fits by coincidence. Such a resize is reported
  for a middling overlap too (IoU below 0.9) when it puts the box on the
  ground truth almost exactly (IoU 0.97 or more): an engine's bounds a
  little under the image's size cost every answer a tenth or more, silently.

A grid that no pixel bounds give for the image is a dataset error of the
reward itself (``image_grid_thw``), reported with the others by
:mod:`~skyrl_rewards.data.check`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from skyrl_rewards.rewards.boxes.detection import ground_truth_detections, predicted_detections
from skyrl_rewards.rewards.boxes.rec import ground_truth_box
from skyrl_rewards.rewards.contract.text import completion_text
from skyrl_rewards.rewards.geometry.box_formats import (
    FAMILIES,
    ORIGINAL,
    RELATIVE_1,
    RELATIVE_1000,
    RESIZED_PIXELS,
    BoxComponent,
    BoxFormat,
    grid_is_possible,
    row_image_size,
)
from skyrl_rewards.rewards.geometry.boxes import Box, iou, predicted_box
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.text.format_checks import FormatRec

OUTSIDE_TOLERANCE = 0.02
"""A box may pass the image's edge by this share of its side (rounding, off-by-one pixels)."""

POOR_IOU = 0.5
FITTING_IOU = 0.9
"""Below :data:`POOR_IOU` in the declared format and at least :data:`FITTING_IOU` in another: reported."""

EXACT_IOU = 0.97
"""Below :data:`FITTING_IOU` and at least this at a resize under other pixel bounds: reported too."""

MAX_IMPLIED_FACTORS = 10_000
"""An implied input past this many factors a side is no resize (a degenerate ground truth)."""


def box_fit_problems(sample: Mapping[str, Any], mix: RewardMix) -> list[tuple[str, str]]:
    """``(field, message)`` for each way the row's boxes do not fit its format (module docstring).

    Rows without an image, without boxes, or whose boxes cannot be read
    (scoring reports those) give no problem here. Never raises for a row.
    """
    formats = _declared_formats(sample, mix)
    found = _image_size(sample)
    if not formats or found is None:
        return []
    width, height = found
    truths = _solution_boxes(sample.get("solution"))
    problems = [
        (
            "solution",
            f"ground-truth box {_show(box)} lies outside the {width}x{height} image "
            "(ground truths are in original-image pixels)",
        )
        for box in truths
        if not _inside(box, width, height)
    ]
    predicted = _completion_boxes(sample.get("completion"))
    if not predicted:
        return problems
    for fmt in formats:
        problems.extend(_completion_fit(predicted, truths, fmt, (width, height)))
    return problems


def _declared_formats(sample: Mapping[str, Any], mix: RewardMix) -> list[BoxFormat]:
    """The distinct formats the mix's box rewards read this row in."""
    formats: list[BoxFormat] = []
    for name in mix.names:
        component = mix.component(name)
        if not isinstance(component, BoxComponent) or isinstance(component, FormatRec):
            continue  # format_rec reads a box's form, not where it is
        try:
            fmt = component.box_format.for_row(sample)
        except ValueError:  # an unknown row format: scoring reports it
            continue
        if fmt not in formats:
            formats.append(fmt)
    return formats


def _completion_fit(
    predicted: list[Box], truths: list[Box], fmt: BoxFormat, size: tuple[int, int]
) -> list[tuple[str, str]]:
    width, height = size
    try:
        converted = [fmt.to_original(box, size) for box in predicted]
    except ValueError:  # an image the resize refuses: scoring reports it
        return []
    outside = [
        box
        for box, seen in zip(predicted, converted, strict=True)
        if not _inside(seen, width, height)
    ]
    if outside:
        return [
            (
                "box_format",
                f"the completion's box {_show(outside[0])} read as {fmt.name} lies outside the "
                f"{width}x{height} image{_hint(predicted, truths, fmt, size)}",
            )
        ]
    if len(predicted) != 1 or len(truths) != 1:
        return []
    declared = iou(converted[0], truths[0])
    if declared >= FITTING_IOU:
        return []
    if declared >= POOR_IOU:  # middling: only a resize under other bounds that fits exactly
        hint = _bounds_hint(predicted, truths, fmt, size, EXACT_IOU)
    else:
        hint = _hint(predicted, truths, fmt, size)
    if not hint:
        return []
    return [
        (
            "box_format",
            f"the completion's box {_show(predicted[0])} read as {fmt.name} overlaps the ground "
            f"truth at IoU {declared:.2f}{hint}",
        )
    ]


def _hint(predicted: list[Box], truths: list[Box], fmt: BoxFormat, size: tuple[int, int]) -> str:
    """The resize under other bounds that fits (:func:`_bounds_hint`), else another system (:func:`_fits_hint`)."""
    return _bounds_hint(predicted, truths, fmt, size) or _fits_hint(predicted, truths, fmt, size)


def _bounds_hint(
    predicted: list[Box],
    truths: list[Box],
    fmt: BoxFormat,
    size: tuple[int, int],
    fitting: float = FITTING_IOU,
) -> str:
    """``"; it fits qwen2_5_vl at a WxH input ..."`` when a resize under other pixel bounds fits, or ``""``.

    Fits: an IoU of at least ``fitting`` with the ground truth. The input
    size the box implies on each axis (its extent over the truth's, times the
    image's side) is rounded to the factor; the possible resizes
    (:func:`grid_is_possible`) near it are tried, the other side following
    the image's aspect, so that a thin box's imprecise axis does not hide
    the fit.
    """
    if fmt.coords != RESIZED_PIXELS or len(predicted) != 1 or len(truths) != 1:
        return ""
    box, truth = predicted[0], truths[0]
    width, height = size
    extents = (box[2] - box[0], box[3] - box[1], truth[2] - truth[0], truth[3] - truth[1])
    if min(extents) <= 0:
        return ""
    factor = fmt.factor
    rows = (extents[1] * height / extents[3]) / factor
    cols = (extents[0] * width / extents[2]) / factor
    if max(rows, cols) > MAX_IMPLIED_FACTORS:
        return ""
    best, best_iou = None, 0.0
    for a, b in _nearby_grids(rows, cols, size):
        if not grid_is_possible((a * fmt.merge_size, b * fmt.merge_size), size, fmt):
            continue
        resized = (b * factor, a * factor)
        overlap = iou(fmt.to_original(box, size, resized), truth)
        if overlap > best_iou:
            best, best_iou = resized, overlap
    if best is None or best_iou < fitting or best == fmt.resized(width, height):
        return ""
    return (
        f"; it fits {fmt.name} at a {best[0]}x{best[1]} input (IoU {best_iou:.2f}), the resize "
        f"under other pixel bounds than min_pixels {fmt.min_pixels}, max_pixels "
        f"{fmt.max_pixels}: give the reward the engine's min_pixels/max_pixels, or prepare the "
        "rows with them (prepare_skyrl_data.py --max-pixels)"
    )


def _nearby_grids(rows: float, cols: float, size: tuple[int, int]) -> set[tuple[int, int]]:
    """``(rows, cols)`` in factors within two of the implied ones, on both axes or on one with the other by the aspect.

    One scale resizes both sides, each floored (``max_pixels``) or ceiled
    (``min_pixels``): ``a`` factors down gives ``b`` within
    ``floor((a - 1) * W / H)`` to ``ceil((a + 1) * W / H)``, and the same across.
    """
    width, height = size

    def near(value: float) -> range:
        return range(max(1, round(value) - 2), round(value) + 3)

    def across(count: int, ratio: float) -> range:
        return range(max(1, math.floor((count - 1) * ratio)), math.ceil((count + 1) * ratio) + 1)

    grids = {(a, b) for a in near(rows) for b in near(cols)}
    grids |= {(a, b) for a in near(rows) for b in across(a, width / height)}
    grids |= {(a, b) for b in near(cols) for a in across(b, height / width)}
    return grids


def _fits_hint(
    predicted: list[Box], truths: list[Box], fmt: BoxFormat, size: tuple[int, int]
) -> str:
    """``"; it fits X (IoU 0.97): set box_format"`` for the best other system, or ``""``."""
    if len(predicted) != 1 or len(truths) != 1:
        return ""
    resized = fmt if fmt.coords == RESIZED_PIXELS else FAMILIES[RESIZED_PIXELS]
    candidates = [
        FAMILIES[ORIGINAL],
        dataclasses.replace(resized, name=f"{RESIZED_PIXELS} (qwen2_5_vl)"),
        dataclasses.replace(FAMILIES[RELATIVE_1000], name=f"{RELATIVE_1000} (qwen2_vl, qwen3_vl)"),
        FAMILIES[RELATIVE_1],
    ]
    best, best_iou = None, 0.0
    for other in candidates:
        if other.coords == fmt.coords:
            continue
        try:
            overlap = iou(other.to_original(predicted[0], size), truths[0])
        except ValueError:
            continue
        if overlap > best_iou:
            best, best_iou = other, overlap
    if best is None or best_iou < FITTING_IOU:
        return ""
    return f"; it fits {best.name} (IoU {best_iou:.2f}): set box_format"


def _image_size(sample: Mapping[str, Any]) -> tuple[int, int] | None:
    try:
        found = row_image_size(sample)
    except ValueError:  # unreadable: reported as image_path
        return None
    return None if found is None else found[0]


def _solution_boxes(solution: Any) -> list[Box]:
    """The ground truth's boxes: one REC box, or a detection list; ``[]`` when neither reads."""
    try:
        return [ground_truth_box(solution)]
    except ValueError:
        pass
    try:
        return [d.box for d in ground_truth_detections(solution) if d.box is not None]
    except ValueError:
        return []


def _completion_boxes(completion: Any) -> list[Box]:
    """The reference completion's boxes: a detection list, else the first box of its answer."""
    if completion is None:
        return []
    content = completion_text(completion)
    detections = predicted_detections(content)
    if detections:
        return [d.box for d in detections if d.box is not None]
    box = predicted_box(content)
    return [] if box is None else [box]


def _inside(box: Box, width: int, height: int) -> bool:
    dx, dy = OUTSIDE_TOLERANCE * width, OUTSIDE_TOLERANCE * height
    return -dx <= box[0] and -dy <= box[1] and box[2] <= width + dx and box[3] <= height + dy


def _show(box: Box) -> str:
    return "[" + ", ".join(f"{v:g}" for v in box) + "]"
