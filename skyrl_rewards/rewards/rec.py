"""Referring-expression comprehension (REC): the IoU reward of one predicted box.

Box coordinates (``box_coords``): with ``"model_input"`` (default, VLM-R1) the
model answers in pixels of its resized input, ``image_grid_thw`` (t, h, w)
patches of ``patch_size`` pixels, and the box is scaled to the original image
before it is compared with the ground truth (in original-image pixels). A row
that has an image (``image_path``, ``image`` or ``images``) but no
``image_grid_thw`` is a dataset error then: comparing unscaled boxes would
score a right answer as wrong without a word. With ``"original"`` the model
answers in original-image pixels and boxes are compared as written. A row
with no image and no grid compares boxes as written.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from PIL import Image

from skyrl_rewards.rewards.debug_log import log_rewards
from skyrl_rewards.rewards.geometry import (
    DEFAULT_PATCH_SIZE,
    Box,
    as_box,
    grid_thw,
    image_path,
    image_size,
    iou,
    predicted_box,
    scale_box,
)
from skyrl_rewards.rewards.masking import MaskedRows
from skyrl_rewards.rewards.result import ComponentScore, Status
from skyrl_rewards.rewards.text import answer_span, completion_text

BOX_COORDS = ("model_input", "original")
"""Where the model's boxes live: the resized model input (scaled by the grid) or the original image."""

IMAGE_COLUMNS = ("image_path", "image", "images")
"""Row columns that carry the image whose size the boxes are scaled to (first found wins)."""


def ground_truth_box(sol: Any) -> Box:
    """The JSON box ``[x1, y1, x2, y2]`` in the answer span of ``sol``; ``ValueError`` otherwise."""
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a string, got {type(sol).__name__}")
    try:
        box = as_box(json.loads(answer_span(sol)))
    except (ValueError, RecursionError):  # JSONDecodeError, or an integer past the digit limit
        box = None
    if box is None:
        raise ValueError(
            f"solution: expected a JSON box [x1, y1, x2, y2], got {answer_span(sol)!r:.80}"
        )
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(f"solution: the box {list(box)} has no area (need x1 < x2 and y1 < y2)")
    return box


def rec_iou_score(
    content: str,
    gt_box: Box,
    *,
    original_size: tuple[int, int] | None = None,
    grid: Sequence[int] | None = None,
    patch_size: int = DEFAULT_PATCH_SIZE,
) -> ComponentScore:
    """IoU of the predicted box (scaled to the original image when size and grid are given) with ``gt_box``.

    ``unparseable`` with 0.0 when the answer holds no box.
    """
    box = predicted_box(content)
    if box is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no [x1, y1, x2, y2] box in the answer")
    if original_size is not None and grid is not None:
        box = scale_box(box, original_size, grid, patch_size)
    return ComponentScore(iou(box, gt_box))


def check_box_coords(box_coords: Any) -> str:
    """``box_coords`` when it is one of :data:`BOX_COORDS`; ``ValueError`` otherwise."""
    if box_coords not in BOX_COORDS:
        raise ValueError(
            f"box_coords: expected 'model_input' or 'original', got {box_coords!r:.80}"
        )
    return box_coords


def iou_sample_score(
    content: str,
    sol: Any,
    columns: dict[str, Any],
    patch_size: int,
    box_coords: str = "model_input",
) -> ComponentScore:
    """:func:`rec_iou_score` for one dataset row, scaled as ``box_coords`` says (see module doc).

    Raises ``ValueError`` naming the field for a bad ground truth, a bad grid,
    an unreadable image, or an image without ``image_grid_thw``.
    """
    gt_box = ground_truth_box(sol)
    if box_coords == "original":
        return rec_iou_score(content, gt_box)
    scaling = row_scaling(columns, patch_size)
    if scaling is None:
        return rec_iou_score(content, gt_box)
    size, grid = scaling
    return rec_iou_score(content, gt_box, original_size=size, grid=grid, patch_size=patch_size)


def row_scaling(
    columns: dict[str, Any], patch_size: int
) -> tuple[tuple[int, int], tuple[int, int, int]] | None:
    """``(original (width, height), grid (t, h, w))`` to scale a row's model-input boxes with.

    ``None`` for a row with neither an image nor a grid (boxes compare as
    written). ``ValueError`` naming the field for an image without
    ``image_grid_thw``, a grid without an image, a bad grid or an unreadable
    image.
    """
    image_column = next((key for key in IMAGE_COLUMNS if _has_value(columns.get(key))), None)
    if columns.get("image_grid_thw") is None:
        if image_column is None:
            return None
        raise ValueError(
            f"image_grid_thw: missing, but the row has an image ({image_column}): the predicted "
            "box cannot be scaled from model-input pixels to the original image. Pass the "
            "processor's image_grid_thw as a column, or box_coords='original' if the model "
            "answers in original-image pixels"
        )
    grid = grid_thw(columns["image_grid_thw"])
    if image_column is None:
        raise ValueError(
            "image_path: missing; image_grid_thw is given, so the original image (image_path, "
            "image or images) is needed to scale the predicted box"
        )
    return original_image_size(columns[image_column], image_column), grid


def original_image_size(value: Any, field: str) -> tuple[int, int]:
    """``(width, height)`` of a row's image: a path (header only), a PIL image, or a list (first item)."""
    if isinstance(value, (list, tuple)):
        value = value[0] if value else None
    if isinstance(value, Image.Image):
        return value.size
    return image_size(image_path(value, field))


def _has_value(value: Any) -> bool:
    if isinstance(value, (list, tuple, str)):
        return len(value) > 0
    return value is not None


_MASKED = MaskedRows("iou_reward")


def iou_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float | None]:
    """VLM-R1's REC IoU reward, one value in [0, 1] per completion (``None`` for a bad row).

    kwargs: ``image_grid_thw[i]`` = (t, h, w) patch grid of the model input and
    the original image as ``image_path[i]`` (a path or list of paths),
    ``image[i]`` or ``images[i]`` (PIL images, as TRL passes them); boxes are
    scaled from ``h*14 x w*14`` to the original size. ``patch_size`` (default
    14) and ``box_coords`` (``"model_input"`` or ``"original"``, see the
    module doc) may be passed. A row that cannot be scored (bad ground truth,
    unreadable image, image without grid) gives ``None`` (TRL leaves it out),
    is warned about once per cause and counted through ``log_metric``; with
    ``SKYRL_REWARDS_ON_ERROR=raise`` it raises ``ValueError`` naming the field
    and the sample index. Bad arguments always raise ``ValueError``.

    >>> iou_reward(["<answer>[0, 0, 10, 10]</answer>"], ["<answer>[0, 0, 10, 10]</answer>"])
    [1.0]
    """
    patch_size = kwargs.get("patch_size", DEFAULT_PATCH_SIZE)
    if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size <= 0:
        raise ValueError(f"patch_size: expected a positive integer, got {patch_size!r}")
    box_coords = check_box_coords(kwargs.get("box_coords", "model_input"))
    if not isinstance(solution, Sequence) or isinstance(solution, str):
        raise ValueError(
            f"solution: expected a list with one ground truth per completion, got {type(solution).__name__}"
        )
    if len(solution) != len(completions):
        raise ValueError(f"solution: {len(solution)} values for {len(completions)} completions")
    contents = [completion_text(c) for c in completions]
    scores = []
    for index, (content, sol) in enumerate(zip(contents, solution, strict=True)):
        try:
            columns = {
                key: _column(kwargs, key, index) for key in ("image_grid_thw", *IMAGE_COLUMNS)
            }
            scores.append(iou_sample_score(content, sol, columns, patch_size, box_coords))
        except ValueError as error:
            scores.append(ComponentScore(0.0, Status.ERROR, str(error)))
    rewards = _MASKED.values(scores, log_metric=kwargs.get("log_metric"))
    log_rewards("iou_reward", contents, rewards)
    return rewards


def _column(kwargs: dict[str, Any], key: str, index: int) -> Any:
    values = kwargs.get(key)
    if values is None:
        return None
    try:
        return values[index]
    except (IndexError, TypeError, KeyError) as error:
        raise ValueError(f"{key}: column has no value for this sample") from error
