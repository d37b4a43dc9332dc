"""Referring-expression comprehension (REC): the IoU reward of one predicted box."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

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
from skyrl_rewards.rewards.result import ComponentScore, Status
from skyrl_rewards.rewards.text import answer_span, completion_text


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


def iou_sample_score(
    content: str, sol: Any, columns: dict[str, Any], patch_size: int
) -> ComponentScore:
    """:func:`rec_iou_score` for one dataset row (``image_path`` and ``image_grid_thw`` optional together)."""
    gt_box = ground_truth_box(sol)
    if columns.get("image_grid_thw") is None:
        return rec_iou_score(content, gt_box)
    grid = grid_thw(columns["image_grid_thw"])
    size = image_size(image_path(columns.get("image_path")))
    return rec_iou_score(content, gt_box, original_size=size, grid=grid, patch_size=patch_size)


def iou_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float]:
    """VLM-R1's REC IoU reward, one float in [0, 1] per completion.

    kwargs: ``image_grid_thw[i]`` = (t, h, w) patch grid of the model input and
    ``image_path[i]`` (a path or list of paths) of the original image; boxes are
    scaled from ``h*14 x w*14`` to the original size (read from the image
    header). Without ``image_grid_thw`` boxes are compared as written.
    ``patch_size`` (default 14) may be passed. A bad row raises ``ValueError``
    naming the field and the sample index.

    >>> iou_reward(["<answer>[0, 0, 10, 10]</answer>"], ["<answer>[0, 0, 10, 10]</answer>"])
    [1.0]
    """
    patch_size = kwargs.get("patch_size", DEFAULT_PATCH_SIZE)
    if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size <= 0:
        raise ValueError(f"patch_size: expected a positive integer, got {patch_size!r}")
    if not isinstance(solution, Sequence) or isinstance(solution, str):
        raise ValueError(
            f"solution: expected a list with one ground truth per completion, got {type(solution).__name__}"
        )
    if len(solution) != len(completions):
        raise ValueError(f"solution: {len(solution)} values for {len(completions)} completions")
    contents = [completion_text(c) for c in completions]
    rewards = []
    for index, (content, sol) in enumerate(zip(contents, solution, strict=True)):
        columns = {key: _column(kwargs, key, index) for key in ("image_grid_thw", "image_path")}
        try:
            rewards.append(iou_sample_score(content, sol, columns, patch_size).value)
        except ValueError as error:
            raise ValueError(f"sample {index}: {error}") from error
    log_rewards("iou_reward", contents, rewards)
    return rewards


def _column(kwargs: dict[str, Any], key: str, index: int) -> Any:
    values = kwargs.get(key)
    if values is None:
        return None
    try:
        return values[index]
    except (IndexError, TypeError, KeyError) as error:
        raise ValueError(f"sample {index}: {key}: column has no value for this sample") from error
