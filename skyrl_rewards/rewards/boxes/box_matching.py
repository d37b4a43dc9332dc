"""Many boxes to many boxes: optimal (Hungarian) matching and the ``boxes_matched`` reward.

The model answers a JSON list of ``{"bbox_2d": [x1, y1, x2, y2], "label": str}``
(optionally with ``"confidence"`` or ``"score"`` in [0, 1]), in a
```` ```json ``` ```` block of its answer span or as the bare span; the
ground truth is such a list in the solution. Predicted and gold boxes are
paired one to one so that the sum of the pairs' IoU is largest (Perception-R1's
bipartite matching); a pair counts only when its labels agree
(case-insensitive; ``match_labels=False`` ignores labels) and its IoU
(continuous coordinates, :func:`~skyrl_rewards.rewards.boxes.giou.box_iou`) is above
``iou_threshold``. Then

    iou_term = sum of the counted pairs' IoU / max(#predictions, #gold)

so every missing box and every extra box dilutes it (Visual-RFT's
``compute_reward_iou_v2`` normalisation). With ``confidence_weight`` w > 0,
Visual-RFT's confidence term joins it:

    confidence_term = mean over predictions of (c if counted in a pair else 1 - c)
    value = (iou_term + w * confidence_term) / (1 + w)

where a prediction without a confidence in [0, 1] scores 0 in that term.
An image with no target (empty gold list) scores 1.0 for an empty prediction
list and 0.0 otherwise; an empty prediction list against targets scores 0.0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.boxes.detection import ground_truth_detections
from skyrl_rewards.rewards.boxes.giou import box_iou
from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.json_extract import json_block, parse_json
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import clean
from skyrl_rewards.rewards.geometry.box_formats import (
    ORIGINAL,
    BoxComponent,
    BoxFormatChoice,
    row_converter,
)
from skyrl_rewards.rewards.geometry.boxes import Box, as_box, is_finite_number
from skyrl_rewards.rewards.geometry.converter import note_clamped

MAX_MATCHED_PREDICTIONS = 100
"""Predictions past this count are never matched (they still count in the denominator)."""

MAX_GROUND_TRUTH_BOXES = 100
"""A ground truth with more boxes is a dataset error: matching is cubic in the box count."""


@dataclass(frozen=True)
class Prediction:
    """One predicted box (``None`` when malformed), its label and its confidence (``None``: none)."""

    box: Box | None
    label: str
    confidence: float | None


def linear_assignment(weights: Sequence[Sequence[float]]) -> list[tuple[int, int]]:
    """Row-column pairs, each row and column at most once, with the largest total weight.

    ``weights`` is a rectangular matrix of finite numbers (rows x columns);
    the result has ``min(rows, columns)`` pairs sorted by row. The Hungarian
    method with potentials (Kuhn-Munkres, shortest augmenting paths), pure
    Python, O(n² m) for n = min(rows, columns), m = max. Raises
    ``ValueError`` for a ragged matrix or a non-finite weight.

    >>> linear_assignment([[1, 5], [4, 1]])
    [(0, 1), (1, 0)]
    """
    rows = [list(map(float, row)) for row in weights]
    if not rows or not rows[0]:
        return []
    width = len(rows[0])
    if any(len(row) != width for row in rows):
        raise ValueError("weights: expected a rectangular matrix")
    if not all(math.isfinite(w) for row in rows for w in row):
        raise ValueError("weights: expected finite numbers")
    transposed = len(rows) > width
    if transposed:
        rows = [list(column) for column in zip(*rows, strict=True)]
    pairs = _min_cost_assignment([[-w for w in row] for row in rows])
    if transposed:
        pairs = [(j, i) for i, j in pairs]
    return sorted(pairs)


def _min_cost_assignment(cost: list[list[float]]) -> list[tuple[int, int]]:
    """Minimum-cost assignment of every row of ``cost`` (rows <= columns) to a distinct column."""
    n, m = len(cost), len(cost[0])
    row_potential = [0.0] * (n + 1)
    col_potential = [0.0] * (m + 1)
    owner = [0] * (m + 1)  # owner[j]: the row (1-based) assigned to column j; 0 for none
    way = [0] * (m + 1)
    for i in range(1, n + 1):
        owner[0] = i
        j0 = 0
        slack = [math.inf] * (m + 1)
        used = [False] * (m + 1)
        while True:
            used[j0] = True
            i0 = owner[j0]
            row, u0 = cost[i0 - 1], row_potential[i0]
            delta, j1 = math.inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    reduced = row[j - 1] - u0 - col_potential[j]
                    if reduced < slack[j]:
                        slack[j], way[j] = reduced, j0
                    if slack[j] < delta:
                        delta, j1 = slack[j], j
            for j in range(m + 1):
                if used[j]:
                    row_potential[owner[j]] += delta
                    col_potential[j] -= delta
                else:
                    slack[j] -= delta
            j0 = j1
            if owner[j0] == 0:
                break
        while j0:
            j1 = way[j0]
            owner[j0] = owner[j1]
            j0 = j1
    return [(owner[j] - 1, j - 1) for j in range(1, m + 1) if owner[j]]


def check_iou_threshold(value: Any) -> float:
    """``value`` as a float when it is a number in [0, 1); ``ValueError`` naming ``iou_threshold``.

    >>> check_iou_threshold(0.5)
    0.5
    """
    if not is_finite_number(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"iou_threshold: expected a number in [0, 1), got {value!r:.80}")
    return float(value)


def check_confidence_weight(value: Any) -> float:
    """``value`` as a float when it is a finite number >= 0; ``ValueError`` naming it.

    >>> check_confidence_weight(1)
    1.0
    """
    if not is_finite_number(value) or value < 0:
        raise ValueError(f"confidence_weight: expected a number >= 0, got {value!r:.80}")
    return float(value)


def predicted_boxes(content: str) -> list[Prediction] | None:
    """The model's boxes, or ``None`` when its answer holds no JSON list.

    The list is the first ```` ```json ``` ```` block of the answer span, else
    the span itself when it starts with ``[`` (parsed with json-repair for
    short texts; sizes capped, see :mod:`~skyrl_rewards.rewards.contract.json_extract`).
    Items that are not ``{"bbox_2d": four numbers, ...}`` stay in the list as
    malformed predictions (they match nothing).
    """
    text = clean(content) if isinstance(content, str) else ""
    block = json_block(text)
    if block is None and not text.startswith("["):
        return None
    data = parse_json(block if block is not None else text)
    if not isinstance(data, list):
        return None
    return [_prediction(item) for item in data]


def _prediction(item: Any) -> Prediction:
    if not isinstance(item, dict):
        return Prediction(None, "", None)
    label = item.get("label")
    confidence = item.get("confidence", item.get("score"))
    if not (is_finite_number(confidence) and 0.0 <= confidence <= 1.0):
        confidence = None
    return Prediction(
        as_box(item.get("bbox_2d")),
        str(label).strip().lower() if label is not None else "",
        float(confidence) if confidence is not None else None,
    )


def gold_boxes(sol: Any) -> list[tuple[Box, str]]:
    """The ground truth's ``(box, label)`` pairs; ``ValueError`` naming ``solution`` when bad.

    Bad: not a JSON list of ``{bbox_2d, label}`` (in a ```` ```json ``` ````
    block of the answer span, or the bare span), a box without area, or more
    than :data:`MAX_GROUND_TRUTH_BOXES` boxes.
    """
    detections = ground_truth_detections(sol)
    if len(detections) > MAX_GROUND_TRUTH_BOXES:
        raise ValueError(
            f"solution: {len(detections)} ground-truth boxes, past the {MAX_GROUND_TRUTH_BOXES} "
            "that boxes_matched matches; split the image's targets or use detection / coco_map"
        )
    gold = []
    for detection in detections:
        box = detection.box
        if box is None or box[2] <= box[0] or box[3] <= box[1]:
            raise ValueError(f"solution: the box {box} has no area (need x1 < x2 and y1 < y2)")
        gold.append((box, detection.label))
    return gold


def matched_pairs(
    predictions: Sequence[Prediction],
    gold: Sequence[tuple[Box, str]],
    *,
    match_labels: bool = True,
    iou_threshold: float = 0.0,
) -> dict[int, float]:
    """Prediction index -> IoU of its gold box, for the pairs of the best one-to-one matching.

    Only pairs with agreeing labels (when ``match_labels``) and IoU above
    ``iou_threshold`` count; the first :data:`MAX_MATCHED_PREDICTIONS`
    predictions take part. Rows and columns without any counting pair are
    left out before the assignment runs.
    """
    weights: dict[tuple[int, int], float] = {}
    for i, pred in enumerate(predictions[:MAX_MATCHED_PREDICTIONS]):
        if pred.box is None:
            continue
        for j, (box, label) in enumerate(gold):
            if match_labels and pred.label != label:
                continue
            overlap = box_iou(pred.box, box)
            if overlap > iou_threshold and overlap > 0.0:
                weights[i, j] = overlap
    rows = sorted({i for i, _ in weights})
    cols = sorted({j for _, j in weights})
    matrix = [[weights.get((i, j), 0.0) for j in cols] for i in rows]
    matched = {}
    for r, c in linear_assignment(matrix):
        overlap = weights.get((rows[r], cols[c]))
        if overlap is not None:
            matched[rows[r]] = overlap
    return matched


def boxes_matched_score(
    content: str,
    sol: Any,
    *,
    match_labels: bool = True,
    iou_threshold: float = 0.0,
    confidence_weight: float = 0.0,
    convert: Callable[[Box], Box] | None = None,
) -> ComponentScore:
    """The ``boxes_matched`` reward in [0, 1] with its outcome (see the module docstring).

    ``convert`` maps each predicted box to original pixels first (``None``:
    as written). No JSON list in the answer: 0.0, status ``unparseable``.
    Raises ``ValueError`` naming ``solution`` for a bad ground truth, or the
    parameter for a bad threshold or weight.

    >>> gt = '<answer>[{"bbox_2d": [0, 0, 10, 10], "label": "cat"}]</answer>'
    >>> boxes_matched_score('[{"bbox_2d": [0, 0, 10, 5], "label": "Cat"}]', gt).value
    0.5
    """
    threshold = check_iou_threshold(iou_threshold)
    weight = check_confidence_weight(confidence_weight)
    gold = gold_boxes(sol)
    predictions = predicted_boxes(content)
    if predictions is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no JSON list of boxes in the answer")
    if not gold or not predictions:
        return ComponentScore(1.0 if not gold and not predictions else 0.0)
    if convert is not None:
        predictions = [
            Prediction(convert(p.box), p.label, p.confidence) if p.box is not None else p
            for p in predictions
        ]
    matched = matched_pairs(predictions, gold, match_labels=match_labels, iou_threshold=threshold)
    value = sum(matched.values()) / max(len(predictions), len(gold))
    if weight > 0:
        confidence = sum(
            0.0 if p.confidence is None else p.confidence if i in matched else 1.0 - p.confidence
            for i, p in enumerate(predictions)
        ) / len(predictions)
        value = (value + weight * confidence) / (1.0 + weight)
    return ComponentScore(min(1.0, max(0.0, value)))


def boxes_matched(content: str, sol: Any, **params: Any) -> float:
    """:func:`boxes_matched_score`'s value: the matched-IoU reward in [0, 1].

    >>> gt = '<answer>[{"bbox_2d": [0, 0, 10, 10], "label": "cat"}]</answer>'
    >>> boxes_matched("<answer>[]</answer>", gt)
    0.0
    """
    return boxes_matched_score(content, sol, **params).value


def boxes_matched_sample_score(
    content: str,
    sol: Any,
    columns: Mapping[str, Any],
    box_format: BoxFormatChoice,
    **params: Any,
) -> ComponentScore:
    """:func:`boxes_matched_score` for one dataset row, boxes converted as the row's format says.

    A format other than ``original`` needs the row's image (``image_path``,
    ``image`` or ``images``): ``ValueError`` naming ``image_path`` otherwise,
    as ``detection`` does.
    """
    fmt = box_format.for_row(columns)
    convert = row_converter(columns, fmt)
    if convert is None and fmt.coords != ORIGINAL:
        raise ValueError(
            f"image_path: missing; box_format {fmt.name!r} needs the row's image to convert "
            "the predicted boxes to its pixels"
        )
    return note_clamped(boxes_matched_score(content, sol, convert=convert, **params), convert)


class BoxesMatched(BoxComponent):
    """Hungarian matching of many predicted boxes to the gold ones (:mod:`~skyrl_rewards.rewards.boxes.box_matching`).

    ``match_labels`` (default True), ``iou_threshold`` (default 0.0: any
    overlap counts; 0.5 is Visual-RFT's), ``confidence_weight`` (default 0.0:
    off; 1.0 averages in Visual-RFT's confidence reward). Boxes as written by
    default (``box_format="original"``, like ``detection``); another format
    converts the predicted boxes with the row's image.
    """

    name = "boxes_matched"
    default_box_format = ORIGINAL

    def __init__(
        self,
        match_labels: bool = True,
        iou_threshold: float = 0.0,
        confidence_weight: float = 0.0,
        **box_params: Any,
    ) -> None:
        if not isinstance(match_labels, bool):
            raise ValueError(f"match_labels: expected true or false, got {match_labels!r:.80}")
        self.params = {
            "match_labels": match_labels,
            "iou_threshold": check_iou_threshold(iou_threshold),
            "confidence_weight": check_confidence_weight(confidence_weight),
        }
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return boxes_matched_sample_score(
            content, sample_solution(sample), sample, self.box_format, **self.params
        )
