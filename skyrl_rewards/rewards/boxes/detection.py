"""Object-detection score: greedy IoU matching of predicted and ground-truth boxes."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.json_extract import json_block, parse_json
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import MAX_ANSWER_CHARS, clean
from skyrl_rewards.rewards.geometry.box_formats import ORIGINAL, BoxComponent
from skyrl_rewards.rewards.geometry.boxes import Box, as_box, iou, is_finite_number
from skyrl_rewards.rewards.geometry.converter import note_clamped

MAX_DETECTIONS = 300
"""Predictions past this count are not matched (they still count as false alarms)."""


@dataclass(frozen=True)
class Detection:
    """One box with its label (``box`` is ``None`` when the model wrote a malformed one)."""

    box: Box | None
    label: str


def detection_score(
    content: str,
    sol: str,
    iou_threshold: float = 0.5,
    alpha: float = 0.7,
    beta: float = 0.0,
    gamma: float = 0.3,
) -> float:
    """Detection score in [0, 1]: weighted position, label and completeness terms (SPEC).

    Boxes come from the first ```` ```json ``` ```` block of ``clean(content)``
    and ``clean(sol)``: a list of ``{"bbox_2d": [x1, y1, x2, y2], "label": str}``.
    Raises ``ValueError`` naming the argument for a threshold that is not a
    number in [0, 1] or bad weights, and naming ``solution`` for an unreadable
    ground truth. The ground truth is trusted and never cut; the model's text is.

    >>> gt = '```json [{"bbox_2d": [0, 0, 10, 10], "label": "cat"}] ```'
    >>> detection_score(gt, gt)
    1.0
    """
    return detection_score_with_status(content, sol, iou_threshold, alpha, beta, gamma).value


def detection_score_with_status(
    content: str,
    sol: str,
    iou_threshold: float = 0.5,
    alpha: float = 0.7,
    beta: float = 0.0,
    gamma: float = 0.3,
    *,
    scale: Callable[[Box], Box] | None = None,
) -> ComponentScore:
    """:func:`detection_score` with its outcome (``unparseable`` when no prediction list was found).

    ``scale`` maps each predicted box before matching (model-input pixels to
    the original image); ``None`` compares boxes as written.
    """
    weights = check_weights(alpha, beta, gamma)
    check_threshold(iou_threshold)
    gt = ground_truth_detections(sol)
    predictions = predicted_detections(content)
    if predictions is not None and scale is not None:
        predictions = [
            Detection(scale(d.box), d.label) if d.box is not None else d for d in predictions
        ]
    if predictions is None:  # read as an empty list, as the reference does
        return ComponentScore(0.0 if gt else 1.0, Status.UNPARSEABLE, "no JSON detection list")
    if not gt:
        return ComponentScore(1.0 if not predictions else 0.0)
    if not predictions:
        return ComponentScore(0.0)
    matches = greedy_match(predictions[:MAX_DETECTIONS], gt, iou_threshold)
    position = sum(overlap for _, _, overlap, same in matches if same) / len(gt)
    label = sum(1 for *_, same in matches if same) / len(gt)
    miss_rate = (len(gt) - len(matches)) / len(gt)
    false_alarm_rate = (len(predictions) - len(matches)) / len(predictions)
    completeness = 1.0 - (miss_rate + false_alarm_rate) / 2.0
    score = (alpha * position + beta * label + gamma * completeness) / sum(weights)
    return ComponentScore(min(1.0, max(0.0, score)))


def check_threshold(iou_threshold: Any) -> float:
    """``iou_threshold`` as a float, or ``ValueError`` unless it is a number in [0, 1].

    >>> check_threshold(0.5)
    0.5
    """
    if not is_finite_number(iou_threshold) or not 0.0 <= iou_threshold <= 1.0:
        raise ValueError(f"iou_threshold: expected a number in [0, 1], got {iou_threshold!r}")
    return float(iou_threshold)


def check_weights(alpha: float, beta: float, gamma: float) -> tuple[float, float, float]:
    """The three weights, or ``ValueError`` unless all are non-negative with a positive sum."""
    weights = (alpha, beta, gamma)
    if not all(is_finite_number(w) for w in weights):
        raise ValueError(f"alpha, beta, gamma: expected finite numbers, got {weights!r}")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(
            f"alpha, beta, gamma: need non-negative weights with a positive sum, got {weights}"
        )
    return weights


def greedy_match(
    predictions: list[Detection], gt: list[Detection], iou_threshold: float
) -> list[tuple[int, int, float, bool]]:
    """Pairs ``(pred, gt, iou, label_correct)`` taken greedily by IoU, highest first.

    Stops at the first best pair below ``iou_threshold``. A wrong-label pair is
    matched (and removed) with ``label_correct`` False.
    """
    candidates = []
    for i, pred in enumerate(predictions):
        if pred.box is None:
            continue
        for j, truth in enumerate(gt):
            overlap = iou(pred.box, truth.box) if truth.box is not None else 0.0
            if overlap >= iou_threshold:
                candidates.append((overlap, i, j))
    candidates.sort(key=lambda c: (-c[0], c[1], c[2]))
    used_pred: set[int] = set()
    used_gt: set[int] = set()
    matches = []
    for overlap, i, j in candidates:
        if i in used_pred or j in used_gt:
            continue
        used_pred.add(i)
        used_gt.add(j)
        matches.append((i, j, overlap, predictions[i].label == gt[j].label))
    return matches


def predicted_detections(content: str) -> list[Detection] | None:
    """The model's detections, or ``None`` when no JSON list could be read."""
    block = json_block(clean(content)) if isinstance(content, str) else None
    data = parse_json(block) if block is not None else None
    if not isinstance(data, list):
        return None
    return [_detection(item) for item in data]


def ground_truth_detections(sol: str) -> list[Detection]:
    """The ground truth's detections; ``ValueError`` naming ``solution`` when unreadable.

    Accepts a ```` ```json ``` ```` block or, for convenience, a bare JSON list
    as the answer span.
    """
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a string, got {type(sol).__name__}")
    text = clean(sol)
    block = json_block(text, max_chars=None)
    data = parse_json(block if block is not None else text, repair=False, max_chars=None)
    if not isinstance(data, list):
        raise ValueError(
            "solution: expected a JSON list of {bbox_2d, label} objects"
            + (
                f" (its answer span is cut at {MAX_ANSWER_CHARS:,} characters)"
                if len(sol) > MAX_ANSWER_CHARS
                else ""
            )
        )
    detections = [_detection(item) for item in data]
    if any(d.box is None for d in detections):
        raise ValueError("solution: every ground-truth item needs a bbox_2d of four numbers")
    return detections


def _detection(item: Any) -> Detection:
    if not isinstance(item, dict):
        return Detection(None, "")
    label = item.get("label", "")
    return Detection(
        as_box(item.get("bbox_2d")), str(label).strip().lower() if label is not None else ""
    )


class DetectionReward(BoxComponent):
    """Detection score with its threshold and weights (the ``detection`` reward; :class:`Detection` is one box).

    ``box_format="original"`` (default, as VLM-R1) compares boxes as written;
    another format (``qwen2_5_vl``, ``qwen3_vl``, ...) converts the predicted
    boxes to the row's original pixels first, like ``iou`` (a row without the
    image the format needs is a dataset error then).
    """

    name = "detection"
    default_box_format = ORIGINAL

    def __init__(
        self,
        iou_threshold: float = 0.5,
        alpha: float = 0.7,
        beta: float = 0.0,
        gamma: float = 0.3,
        **box_params: Any,
    ) -> None:
        check_weights(alpha, beta, gamma)
        check_threshold(iou_threshold)
        self.params = {"iou_threshold": iou_threshold, "alpha": alpha, "beta": beta, "gamma": gamma}
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        fmt = self.box_format.for_row(sample)
        convert = self.converter(sample)
        if convert is None and fmt.coords != ORIGINAL:
            raise ValueError(
                f"image_path: missing; box_format {fmt.name!r} needs the row's image to convert "
                "the predicted boxes to its pixels"
            )
        score = detection_score_with_status(content, solution, **self.params, scale=convert)
        return note_clamped(score, convert)
