"""Does a row's box data fit its declared box format? The checks ``skyrl-rewards check`` adds.

A wrong box format never raises while scoring: a Qwen3-VL answer on the
0-1000 grid read as original pixels is just a poor IoU. These checks find
the rows where the numbers say the format is wrong:

- a ground-truth box that lies outside its image (ground truths are in
  original-image pixels, whatever the policy's format);
- a reference ``completion`` whose box, read in the declared format, lies
  outside the image, or overlaps the ground truth poorly (IoU below 0.5)
  while another coordinate system puts it on the ground truth (IoU 0.9 or
  more): the row names the system that fits.

A grid that disagrees with the computed resize is a dataset error of the
reward itself (``image_grid_thw``), reported with the others by
:mod:`~skyrl_rewards.data.check`.
"""

from __future__ import annotations

import dataclasses
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
                f"{width}x{height} image{_fits_hint(predicted, truths, fmt, size)}",
            )
        ]
    if len(predicted) != 1 or len(truths) != 1:
        return []
    declared = iou(converted[0], truths[0])
    if declared >= POOR_IOU:
        return []
    hint = _fits_hint(predicted, truths, fmt, size)
    if not hint:
        return []
    return [
        (
            "box_format",
            f"the completion's box {_show(predicted[0])} read as {fmt.name} overlaps the ground "
            f"truth at IoU {declared:.2f}{hint}",
        )
    ]


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
