"""COCO average precision of predicted boxes: VLM-R1's ``map``, ``od_ap``, ``od_ap50`` and ``odLength``.

The boxes are ``{"bbox_2d": [x1, y1, x2, y2], "label": ...}`` items of the
last ```` ```json ``` ```` block. They are scored by pycocotools' ``COCOeval``
as VLM-R1 does: one synthetic 2048x2048 image, one category per distinct
ground-truth label (numbered in order of first appearance), every prediction
with score 1.0; AP@[.5:.95] (``stats[0]``) or AP50 (``stats[1]``), area
``all``, at most 100 detections per category. docs/rewards.md lists where this
module differs from the reference and why.

What the model wrote never raises: a prediction that is not a dict, has a
label that is not a ground-truth label, or a ``bbox_2d`` that is not four
finite numbers is dropped (it still counts for ``odLength``), as the
reference's bare ``except`` drops what it cannot read. A malformed ground
truth raises ``ValueError`` naming ``solution`` (the pool masks the row).
pycocotools (and numpy) are imported on the first evaluation, not with this
module.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.json_extract import MAX_JSON_CHARS, last_json_block
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import (
    MAX_ANSWER_CHARS,
    MAX_TEXT_CHARS,
    answer_span,
    completion_text,
    tagged_answer,
)
from skyrl_rewards.rewards.geometry.box_formats import BOX_FORMAT_COLUMN, ORIGINAL, BoxComponent
from skyrl_rewards.rewards.geometry.converter import note_clamped

MAP_METHODS = ("map", "od_ap", "od_ap50", "odLength")
"""The ``accu_reward_method`` values scored here."""

IMAGE_SIZE = 2048
"""Side of the synthetic image the reference declares (COCOeval's box AP does not read it)."""

MAX_DETECTIONS_PER_LABEL = 100
"""Predictions per label handed to COCOeval: its ``maxDets``, past which it ignores them anyway.

This is the cap on predicted boxes: the rest of a label's predictions are
never evaluated (the value is exact), so one evaluation handles at most 100
boxes per ground-truth label however long the list; the list itself comes
from at most :data:`~skyrl_rewards.rewards.contract.json_extract.MAX_JSON_CHARS`
characters of JSON.
"""

MAX_BOX_AREA = 1e10
"""COCO's area range ``all`` is [0, 1e5 ** 2]: a ground-truth box past it would be ignored."""

Label = Hashable
"""A ground-truth label: a string or a number, as JSON gives it."""


@dataclass(frozen=True)
class Box:
    """One box: its label and ``[x1, y1, x2, y2]`` as the JSON gave them (ints stay ints)."""

    label: Label
    coords: tuple[float, float, float, float]


def coco_map(content: str, sol: str, method: str = "map") -> float:
    """COCO AP reward in [0, 1] of ``content``'s boxes against ``sol``'s (SPEC, ``map`` ... ``odLength``).

    ``method`` is one of :data:`MAP_METHODS`. ``map`` reads the last
    ```` ```json ``` ```` block of each whole text; the others read the
    ``<answer>`` spans (a completion without one scores 0.0). Both lists
    empty: 1.0; one empty: 0.0. ``od_ap50`` is AP at IoU 0.5; ``odLength``
    multiplies AP@[.5:.95] by ``min(1, len(truth) / len(predicted))``.

    A perfect answer scores ``1 - 2.2e-16``, as in the reference: COCOeval
    divides true positives by ``tp + fp + eps``.

    >>> gt = '```json [{"bbox_2d": [10, 10, 50, 50], "label": "cat"}] ```'
    >>> round(coco_map(gt, gt), 12)
    1.0
    """
    return coco_map_score(content, sol, method).value


def coco_map_score(
    content: str,
    sol: str,
    method: str = "map",
    *,
    convert: Callable[[tuple[float, float, float, float]], tuple[float, float, float, float]]
    | None = None,
) -> ComponentScore:
    """:func:`coco_map` with its outcome; ``convert`` maps each predicted box first (box formats).

    Status ``unparseable`` when the completion has no ``<answer>`` span (the
    ``od`` methods), no JSON block, JSON that does not parse (both read as an
    empty list, as the reference does), JSON that is not a list, a block
    longer than :data:`~skyrl_rewards.rewards.contract.json_extract.MAX_JSON_CHARS`,
    or a text that reaches its cap (an answer span
    :data:`~skyrl_rewards.rewards.contract.text.MAX_ANSWER_CHARS`, a whole completion
    :data:`~skyrl_rewards.rewards.contract.text.MAX_TEXT_CHARS`): these score 0.0.
    Raises ``ValueError`` for an unknown ``method`` or a malformed ground
    truth, whatever the completion holds.
    """
    if method not in MAP_METHODS:
        raise ValueError(
            f"accu_reward_method: unknown mAP method {method!r}; expected one of {MAP_METHODS}"
        )
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a string, got {type(sol).__name__}")
    if method == "map":
        student, truth = content if isinstance(content, str) else "", ground_truth_boxes(sol)
        cut_at = MAX_TEXT_CHARS
    else:
        gold = answer_span(sol)
        if len(gold) >= MAX_ANSWER_CHARS:
            raise ValueError(
                f"solution: the answer span reaches the {MAX_ANSWER_CHARS:,}-character cap "
                "and may be cut; use accu_reward_method 'map', which reads the whole solution"
            )
        student, truth = tagged_answer(content), ground_truth_boxes(gold)
        if student is None:
            return ComponentScore(0.0, Status.UNPARSEABLE, "no <answer> span")
        cut_at = MAX_ANSWER_CHARS
    if len(student) >= cut_at:  # cut: a block may have lost its end, and must not read as empty
        return ComponentScore(
            0.0, Status.UNPARSEABLE, f"the text reaches the {cut_at:,}-character cap"
        )
    predicted, why = predicted_items(student)
    if predicted is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, why)
    status = Status.UNPARSEABLE if why else Status.OK
    if not predicted or not truth:
        return ComponentScore(1.0 if not predicted and not truth else 0.0, status, why)
    boxes = predicted_boxes(predicted, truth)
    if convert is not None:
        boxes = [
            Box(box.label, coords)
            for box in boxes
            if (coords := _coords(list(convert(box.coords)))) is not None
        ]
    if not boxes:
        return ComponentScore(0.0, status, why)
    value = average_precision(boxes, truth, ap50=method == "od_ap50")
    if method == "odLength" and len(predicted) > len(truth):
        value = value * (len(truth) / len(predicted))
    return ComponentScore(value, status, why)


def predicted_items(text: str) -> tuple[list[Any] | None, str]:
    """The model's prediction list and why it is unreadable (``""`` when it is readable).

    The last block of the text (cut to
    :data:`~skyrl_rewards.rewards.contract.text.MAX_TEXT_CHARS`; the search is linear,
    so a block after a long reasoning trace is found). No block, or a block
    whose JSON does not parse, gives ``[]`` (the reference's reading); JSON
    that is not a list, or a block longer than
    :data:`~skyrl_rewards.rewards.contract.json_extract.MAX_JSON_CHARS`, gives ``None``
    (the floor, 0.0).
    """
    block = last_json_block(text, max_chars=MAX_TEXT_CHARS) if isinstance(text, str) else None
    if block is None:
        return [], "no ```json block"
    if len(block) > MAX_JSON_CHARS:
        return None, f"the JSON block is longer than {MAX_JSON_CHARS:,} characters"
    try:
        data = json.loads(block)
    except (ValueError, RecursionError):
        return [], "the JSON block does not parse"
    if not isinstance(data, list):
        return None, f"the JSON block holds a {type(data).__name__}, not a list of boxes"
    return data, ""


def predicted_boxes(items: Sequence[Any], truth: Sequence[Box]) -> list[Box]:
    """The readable predictions whose label is a ground-truth label, the first 100 of each label."""
    labels = {box.label for box in truth}
    per_label: dict[Label, int] = {}
    boxes = []
    for item in items:
        if not isinstance(item, dict):
            continue
        label = item.get("label")
        if isinstance(label, (list, dict)) or label not in labels:
            continue
        coords = _coords(item.get("bbox_2d"))
        if coords is None or per_label.get(label, 0) >= MAX_DETECTIONS_PER_LABEL:
            continue
        per_label[label] = per_label.get(label, 0) + 1
        boxes.append(Box(label, coords))
    return boxes


def ground_truth_boxes(text: str) -> list[Box]:
    """The ground truth's boxes; ``ValueError`` naming ``solution`` when it is malformed.

    The last ```` ```json ``` ```` block; without one, an answer span that is
    a bare JSON list, and otherwise (``None``, prose) no boxes, as the
    reference reads it. Every item needs a ``label`` (a string or a number)
    and a ``bbox_2d`` of four finite numbers with ``x1 <= x2``, ``y1 <= y2``
    and an area COCO does not ignore.
    """
    block = last_json_block(text, max_chars=None)
    if block is None:
        block = answer_span(text)
        if not block.startswith("["):
            return []
    if not block:
        return []
    try:
        data = json.loads(block)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"solution: the ground truth's JSON does not parse: {error}") from error
    if not isinstance(data, list):
        raise ValueError(
            f"solution: expected a JSON list of {{bbox_2d, label}} objects, got a {type(data).__name__}"
        )
    return [_ground_truth_box(index, item) for index, item in enumerate(data)]


def _ground_truth_box(index: int, item: Any) -> Box:
    where = f"solution: ground-truth item {index}"
    if not isinstance(item, dict):
        raise ValueError(f"{where}: expected a {{bbox_2d, label}} object, got {item!r:.80}")
    label = item.get("label")
    if isinstance(label, bool) or not isinstance(label, (str, int, float)) or not _finite(label):
        raise ValueError(f"{where}: label must be a string or a number, got {label!r:.80}")
    coords = _coords(item.get("bbox_2d"))
    if coords is None:
        raise ValueError(
            f"{where}: bbox_2d must be four finite numbers, got {item.get('bbox_2d')!r:.80}"
        )
    x1, y1, x2, y2 = coords
    if not (x1 <= x2 and y1 <= y2 and (x2 - x1) * (y2 - y1) <= MAX_BOX_AREA):
        raise ValueError(
            f"{where}: bbox_2d {list(coords)} needs x1 <= x2, y1 <= y2 and an area up to "
            f"{MAX_BOX_AREA:g} (COCO ignores other ground-truth boxes)"
        )
    return Box(label, coords)


def _coords(value: Any) -> tuple[float, float, float, float] | None:
    """Four numbers (not booleans) whose box has a finite width, height and area, else ``None``."""
    if not isinstance(value, list) or len(value) != 4:
        return None
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not _finite(v) for v in value):
        return None
    x1, y1, x2, y2 = value
    try:
        sizes = (float(x2 - x1), float(y2 - y1), float((x2 - x1) * (y2 - y1)))
    except OverflowError:
        return None
    if not all(math.isfinite(size) for size in sizes):
        return None
    return x1, y1, x2, y2


def _finite(value: Any) -> bool:
    """Strings pass; a number passes when it is finite as a float."""
    if isinstance(value, str):
        return True
    try:
        return math.isfinite(value)
    except OverflowError:  # an int past float range
        return False


_COCO_LOCK = threading.Lock()
"""pycocotools prints; its output is silenced by swapping ``sys.stdout``, one evaluation at a time.

While an evaluation runs (milliseconds), what another thread of this process
prints to ``sys.stdout`` is lost too; library code here never prints.
"""


def average_precision(
    predicted: Sequence[Box], truth: Sequence[Box], *, ap50: bool = False
) -> float:
    """COCO box AP in [0, 1] of ``predicted`` (score 1.0 each, in order) against ``truth``.

    AP@[.5:.95] (``COCOeval.stats[0]``), or with ``ap50`` AP at IoU 0.5
    (``stats[1]``). Both lists must be non-empty and every predicted label a
    ground-truth label. pycocotools' ``evaluate`` and ``accumulate`` run for
    the one area range and detection limit those two figures read (area
    ``all``, 100 detections), with their printing silenced; the figure is
    then ``summarize``'s mean over the precision entries it counts (not -1).
    The differential test checks it against the full ``summarize``.

    >>> cat = Box("cat", (10, 10, 50, 50))
    >>> round(average_precision([cat], [cat]), 12)
    1.0
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    categories: dict[Label, int] = {}
    for box in truth:
        categories.setdefault(box.label, len(categories))
    gold = COCO()
    gold.dataset = {
        "images": [
            {"id": 0, "width": IMAGE_SIZE, "height": IMAGE_SIZE, "file_name": "image_0.jpg"}
        ],
        "categories": [{"id": index, "name": label} for label, index in categories.items()],
        "annotations": [
            {
                "id": index + 1,
                "image_id": 0,
                "category_id": categories[box.label],
                "bbox": _xywh(box),
                "area": _area(box),
                "iscrowd": 0,
            }
            for index, box in enumerate(truth)
        ],
    }
    detections = [
        {"image_id": 0, "category_id": categories[box.label], "bbox": _xywh(box), "score": 1.0}
        for box in predicted
    ]
    with _COCO_LOCK, contextlib.redirect_stdout(io.StringIO()):
        gold.createIndex()
        evaluation = COCOeval(gold, gold.loadRes(detections), "bbox")
        evaluation.params.areaRng = [[0, MAX_BOX_AREA]]
        evaluation.params.areaRngLbl = ["all"]
        evaluation.params.maxDets = [MAX_DETECTIONS_PER_LABEL]
        evaluation.evaluate()
        evaluation.accumulate()
    precision = evaluation.eval["precision"]  # [IoU threshold, recall, category, area, max dets]
    if ap50:
        precision = precision[evaluation.params.iouThrs == 0.5]
    counted = precision[:, :, :, 0, 0]
    counted = counted[counted > -1]
    return float(counted.mean()) if counted.size else 0.0  # every category has a counted truth


def _xywh(box: Box) -> list[float]:
    x1, y1, x2, y2 = box.coords
    return [x1, y1, x2 - x1, y2 - y1]


def _area(box: Box) -> float:
    x1, y1, x2, y2 = box.coords
    return (x2 - x1) * (y2 - y1)


class CocoMap(BoxComponent):
    """COCO AP of the predicted boxes with one of VLM-R1's mAP methods, whatever the row's column.

    ``method``: ``map`` (default; the last JSON block of the whole completion),
    ``od_ap``, ``od_ap50`` or ``odLength`` (the ``<answer>`` span); see
    :mod:`skyrl_rewards.rewards.boxes.coco_map`. Boxes as written by default
    (``box_format="original"``, as VLM-R1); another format converts the
    predicted boxes to the row's original pixels first.
    """

    name = "coco_map"
    default_box_format = ORIGINAL

    def __init__(self, method: str = "map", **box_params: Any) -> None:
        if method not in MAP_METHODS:
            raise ValueError(f"method: expected one of {MAP_METHODS}, got {method!r}")
        self.method = method
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        solution = sample_solution(sample)
        convert = self.converter(sample)
        return note_clamped(
            coco_map_score(content, solution, self.method, convert=convert), convert
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        solution = sample.get("solution")
        if not isinstance(solution, str):
            return None
        content = completion_text(sample.get("completion"))
        return self.box_work_key(
            sample, self.method, repr(sample.get(BOX_FORMAT_COLUMN)), solution, content
        )
