"""Referring-expression comprehension (REC): the IoU reward of one predicted box.

The predicted box is in the policy's box format (``box_format``: a model
family such as ``qwen2_5_vl`` or ``qwen3_vl``, or a generic system; see
:mod:`~skyrl_rewards.rewards.geometry.box_formats`) and is converted to the original
image's pixels, where the ground truth is, before the IoU. The default,
``qwen2_5_vl``, is VLM-R1's: pixels of the resized model input, the resize
computed from the image (a row's ``image_grid_thw`` is checked against it).
A resized-pixel row with neither an image nor a grid compares boxes as
written; a relative format needs the image's size.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.debug_log import log_rewards
from skyrl_rewards.rewards.contract.masking import MaskedRows
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span, completion_text
from skyrl_rewards.rewards.geometry.box_formats import (
    BOX_FORMAT_COLUMN,
    BOX_FORMAT_PARAMS,
    IMAGE_COLUMNS,
    IMAGE_RESIZE_COLUMN,
    BoxComponent,
    BoxFormatChoice,
    row_converter,
)
from skyrl_rewards.rewards.geometry.boxes import Box, as_box, iou, predicted_box
from skyrl_rewards.rewards.geometry.converter import note_clamped


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
    content: str, gt_box: Box, *, convert: Callable[[Box], Box] | None = None
) -> ComponentScore:
    """IoU of the predicted box (mapped by ``convert`` to original pixels when given) with ``gt_box``.

    ``unparseable`` with 0.0 when the answer holds no box.
    """
    box = predicted_box(content)
    if box is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no [x1, y1, x2, y2] box in the answer")
    if convert is not None:
        box = convert(box)
    return ComponentScore(iou(box, gt_box))


def iou_sample_score(
    content: str, sol: Any, columns: Mapping[str, Any], box_format: BoxFormatChoice
) -> ComponentScore:
    """:func:`rec_iou_score` for one dataset row, its box converted as the row's format says.

    Raises ``ValueError`` naming the field for a bad ground truth, an unknown
    ``box_format``, a bad or mismatched grid, or a missing or unreadable image
    the format needs.
    """
    gt_box = ground_truth_box(sol)
    convert = row_converter(columns, box_format.for_row(columns))
    return note_clamped(rec_iou_score(content, gt_box, convert=convert), convert)


_MASKED = MaskedRows("iou_reward")


def iou_reward(completions: list[Any], solution: list[Any], **kwargs: Any) -> list[float | None]:
    """VLM-R1's REC IoU reward, one value in [0, 1] per completion (``None`` for a bad row).

    kwargs: the original image as ``image_path[i]`` (a path or list of
    paths), ``image[i]`` or ``images[i]`` (PIL images, as TRL passes them),
    optionally ``image_grid_thw[i]`` (the model's input when some pixel
    bounds give it for the image, else a dataset error), a ``box_format``
    column (a list: each row's own format) and an ``image_resize`` column
    (each row's processor settings, as ``prepare_skyrl_data.py`` writes them). A string
    ``box_format`` is the reward's format (default ``qwen2_5_vl``; see
    :mod:`~skyrl_rewards.rewards.geometry.box_formats`); the processor's
    ``min_pixels``/``max_pixels``/``patch_size``/``merge_size`` and the
    former ``box_coords`` may be passed too. A row that cannot be scored (bad ground truth,
    unreadable image, image without grid) gives ``None`` (TRL leaves it out),
    is warned about once per cause and counted through ``log_metric``; with
    ``SKYRL_REWARDS_ON_ERROR=raise`` it raises ``ValueError`` naming the field
    and the sample index. Bad arguments always raise ``ValueError``.

    >>> iou_reward(["<answer>[0, 0, 10, 10]</answer>"], ["<answer>[0, 0, 10, 10]</answer>"])
    [1.0]
    """
    box_format = box_format_choice(kwargs)
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
            columns = {key: _column(kwargs, key, index) for key in (*ROW_COLUMNS, *IMAGE_COLUMNS)}
            scores.append(iou_sample_score(content, sol, columns, box_format))
        except ValueError as error:
            scores.append(ComponentScore(0.0, Status.ERROR, str(error)))
    rewards = _MASKED.values(scores, log_metric=kwargs.get("log_metric"))
    log_rewards("iou_reward", contents, rewards)
    return rewards


ROW_COLUMNS = ("image_grid_thw", BOX_FORMAT_COLUMN, IMAGE_RESIZE_COLUMN)
"""Per-row columns a box reward reads besides the image."""


def box_format_choice(kwargs: Mapping[str, Any], default: str = "qwen2_5_vl") -> BoxFormatChoice:
    """The format a batch reward's keyword arguments choose; ``ValueError`` naming a bad one.

    A ``box_format`` that is a list is the dataset's per-row column (TRL passes
    columns as lists), not the reward's format.
    """
    params = {k: kwargs[k] for k in BOX_FORMAT_PARAMS if k in kwargs}
    if isinstance(params.get("box_format"), (list, tuple)):
        del params["box_format"]
    return BoxFormatChoice.build(**params, default=default)


def _column(kwargs: dict[str, Any], key: str, index: int) -> Any:
    values = kwargs.get(key)
    if values is None or isinstance(values, str):  # a string box_format is the reward's own
        return None
    try:
        return values[index]
    except (IndexError, TypeError, KeyError) as error:
        raise ValueError(f"{key}: column has no value for this sample") from error


class Iou(BoxComponent):
    """REC IoU of the predicted box, converted from the row's box format (see rec, box_formats)."""

    name = "iou"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return iou_sample_score(content, sample_solution(sample), sample, self.box_format)
