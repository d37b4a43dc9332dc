"""GUI agent rewards: GUI-R1's action accuracy and GUI-G2's Gaussian grounding rewards.

Both read coordinates in the policy's box format and compare them in
original-image pixels, where ground truths are written (the component passes
``convert``, its row's map from :mod:`~skyrl_rewards.rewards.geometry.box_formats`;
``None`` compares as written). Actions are read by
:mod:`~skyrl_rewards.rewards.gui.gui_actions`.

- :func:`gui_action_reward` (GUI-R1's ``r1gui_accuracy_reward``): 1.0 when the
  action type matches and its argument is right: a point action lands strictly
  inside the target box, or strictly within ``radius_px`` of the target point;
  a text action's token F1 is at least ``f1_threshold``; a scroll's direction
  is the same; any other action needs only its type. Otherwise 0.0
  (``type_credit`` when only the type is right).
- :func:`gui_point_reward` (GUI-G2's ``gaussian_point_reward`` and
  ``gaussian_plane_reward``): a Gaussian over the target element with
  ``sigma = sigma_scale * (width, height)``; ``form="point"`` scores the
  predicted point (a predicted box's centre) by the density's shape,
  ``form="plane"`` the predicted box by ``exp(-Bhattacharyya distance)``
  between its Gaussian and the target's; ``form="both"`` their sum, in [0, 2],
  as GUI-G2 trains (a mix holds one reward of a name).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.component_base import sample_solution
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span, cap
from skyrl_rewards.rewards.geometry.box_formats import BoxComponent
from skyrl_rewards.rewards.geometry.boxes import Box, as_box
from skyrl_rewards.rewards.geometry.converter import note_clamped
from skyrl_rewards.rewards.gui.gui_actions import (
    DIRECTION_ACTIONS,
    POINT_ACTIONS,
    TEXT_ACTIONS,
    Action,
    TargetAction,
    canonical_direction,
    parse_action,
    parse_location,
    target_action,
)

DEFAULT_RADIUS_PX = 140.0
"""GUI-R1's click radius around a target point (it is in pixels of GUI-R1's resized input; here original pixels)."""

DEFAULT_F1_THRESHOLD = 0.5
"""GUI-R1's least token F1 for a typed or selected text."""

DEFAULT_SIGMA_SCALE = 0.5
"""GUI-G2's ``alpha``: the Gaussian's sigma per axis as a fraction of the element's width / height."""

GUI_POINT_FORMS = ("point", "plane", "both")
"""``both`` is GUI-G2's recipe in one reward: point + plane, in [0, 2] (its two rewards at weight 1)."""

MAX_F1_CHARS = 10_000
"""Each text is cut to this length before it is split into tokens."""

Convert = Callable[[Box], Box]


def _check_fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name}: expected a number in [0, 1], got {value!r:.80}")
    return float(value)


def _check_positive(name: str, value: Any) -> float:
    try:
        number = float(value) if not isinstance(value, (bool, str)) else math.nan
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not (math.isfinite(number) and number > 0):
        raise ValueError(f"{name}: expected a positive number, got {value!r:.80}")
    return number


@dataclass(frozen=True)
class GuiActionParams:
    """How :func:`gui_action_reward` judges an action's argument; ``ValueError`` naming a bad one."""

    radius_px: float = DEFAULT_RADIUS_PX
    """Hit radius around a target point, in original-image pixels (a row's ``radius`` wins)."""
    f1_threshold: float = DEFAULT_F1_THRESHOLD
    """Least token F1 of a text action's text (GUI-R1: 0.5)."""
    substring_match: bool = False
    """GUI-R1's rule that one word inside the other (``"e"`` in ``"settings"``) is a full match."""
    type_credit: float = 0.0
    """Value when the action type is right and its argument wrong (GUI-R1: 0.0)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "radius_px", _check_positive("radius_px", self.radius_px))
        object.__setattr__(self, "f1_threshold", _check_fraction("f1_threshold", self.f1_threshold))
        object.__setattr__(self, "type_credit", _check_fraction("type_credit", self.type_credit))
        if not isinstance(self.substring_match, bool):
            raise ValueError(
                f"substring_match: expected true or false, got {self.substring_match!r:.80}"
            )


def text_f1(predicted: str, truth: str, *, substring_match: bool = False) -> float:
    """GUI-R1's token F1 in [0, 1] of two texts: sets of lower-cased whitespace tokens, brackets dropped.

    With ``substring_match`` (GUI-R1's rule), two one-token texts where one
    contains the other score 1.0. An empty side scores 0.0.

    >>> text_f1("Shanghai shopping mall", "shopping mall")
    0.8
    """
    pred = _tokens(predicted)
    gold = _tokens(truth)
    if substring_match and len(pred) == 1 and len(gold) == 1:
        (p,), (g,) = pred, gold
        if p in g or g in p:
            return 1.0
    common = len(pred & gold)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(gold)
    return 2 * precision * recall / (precision + recall)


def _tokens(text: str) -> set[str]:
    return set(cap(text, MAX_F1_CHARS).replace("[", "").replace("]", "").lower().split())


def gui_action_reward(
    content: str,
    sol: Any,
    *,
    radius_px: float = DEFAULT_RADIUS_PX,
    f1_threshold: float = DEFAULT_F1_THRESHOLD,
    substring_match: bool = False,
    type_credit: float = 0.0,
) -> float:
    """GUI-R1's action accuracy in [0, 1] of ``content`` against the ground-truth action ``sol``.

    ``sol``: see :func:`~skyrl_rewards.rewards.gui.gui_actions.target_action`
    (``ValueError`` naming ``solution`` when malformed). Coordinates are
    compared as written (use the ``gui_action`` component for a box format).
    Never raises because of ``content``.

    >>> gui_action_reward("<answer>click(15, 20)</answer>", '{"action": "click", "bbox": [10, 10, 30, 30]}')
    1.0
    """
    params = GuiActionParams(radius_px, f1_threshold, substring_match, type_credit)
    return gui_action_score(content, target_action(sol), params).value


def gui_action_score(
    content: str,
    target: TargetAction,
    params: GuiActionParams = GuiActionParams(),  # noqa: B008 - frozen, immutable
    *,
    convert: Convert | None = None,
) -> ComponentScore:
    """:func:`gui_action_reward` with its outcome; ``unparseable`` (0.0) when no action was read.

    ``convert`` maps a predicted box (a point as ``(x, y, x, y)``) to original
    pixels; it is called only for a point action.
    """
    action = parse_action(content)
    if action is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no GUI action in the answer")
    if action.name != target.name:
        return ComponentScore(0.0)
    return ComponentScore(
        1.0 if _argument_matches(action, target, params, convert) else params.type_credit
    )


def _argument_matches(
    action: Action, target: TargetAction, params: GuiActionParams, convert: Convert | None
) -> bool:
    if target.name in POINT_ACTIONS:
        point = _converted_point(action, convert)
        if point is None:
            return False
        x, y = point
        if target.box is not None:
            x1, y1, x2, y2 = target.box
            return x1 < x < x2 and y1 < y < y2
        assert target.point is not None  # a located target has a box or a point
        radius = target.radius if target.radius is not None else params.radius_px
        dx, dy = x - target.point[0], y - target.point[1]
        return dx * dx + dy * dy < radius * radius
    if target.name in TEXT_ACTIONS:
        if action.text is None:
            return False
        assert target.text is not None
        score = text_f1(action.text, target.text, substring_match=params.substring_match)
        return score >= params.f1_threshold
    if target.name in DIRECTION_ACTIONS:
        return (
            action.direction is not None
            and canonical_direction(action.direction) == target.direction
        )
    return True


def _converted_point(action: Action | None, convert: Convert | None) -> tuple[float, float] | None:
    if action is None or action.point is None:
        return None
    if convert is None:
        return action.point
    if action.box is not None:
        return _centre(convert(action.box))
    x, y, _, _ = convert((*action.point, *action.point))
    return _finite((x, y))


def _centre(box: Box) -> tuple[float, float] | None:
    return _finite(((box[0] + box[2]) / 2, (box[1] + box[3]) / 2))


def _finite(point: tuple[float, float]) -> tuple[float, float] | None:
    return point if all(math.isfinite(c) for c in point) else None


@dataclass(frozen=True)
class GuiPointParams:
    """How :func:`gui_point_reward` scores; ``ValueError`` naming a bad parameter."""

    form: str = "point"
    """``point``: the Gaussian at the predicted point; ``plane``: the overlap with the box's; ``both``: the sum."""
    sigma_scale: float = DEFAULT_SIGMA_SCALE
    """GUI-G2's ``alpha``: sigma = sigma_scale * element width (height)."""

    def __post_init__(self) -> None:
        if self.form not in GUI_POINT_FORMS:
            raise ValueError(f"form: expected one of {GUI_POINT_FORMS}, got {self.form!r:.80}")
        object.__setattr__(self, "sigma_scale", _check_positive("sigma_scale", self.sigma_scale))


def target_box(sol: Any) -> Box:
    """The target element's box ``[x1, y1, x2, y2]`` (original pixels); ``ValueError`` naming ``solution``.

    ``sol`` is a list of four numbers (GUI-G2's ``abs_box``), a dict with
    ``bbox`` / ``gt_bbox`` / ``bbox_2d``, or either as JSON (the whole string
    or its answer span). The box needs an area (the Gaussian's sigma is its size).

    >>> target_box("<answer>[0, 0, 10, 20]</answer>")
    (0.0, 0.0, 10.0, 20.0)
    """
    data = sol
    if isinstance(sol, str):
        try:
            data = json.loads(answer_span(sol))
        except (ValueError, RecursionError):
            data = None
    if isinstance(data, Mapping):
        data = next((data[k] for k in ("bbox", "gt_bbox", "bbox_2d") if k in data), None)
    box = as_box(list(data)) if isinstance(data, (list, tuple)) else None
    if box is None:
        raise ValueError(
            f"solution: expected the element's box [x1, y1, x2, y2] (or an object with 'bbox'), "
            f"got {sol!r:.80}"
        )
    if box[2] <= box[0] or box[3] <= box[1]:
        raise ValueError(f"solution: the box {list(box)} has no area (need x1 < x2 and y1 < y2)")
    return box


def gaussian_point(
    point: tuple[float, float], box: Box, sigma_scale: float = DEFAULT_SIGMA_SCALE
) -> float:
    """GUI-G2's point reward in [0, 1]: ``exp(-((dx/sx)^2 + (dy/sy)^2) / 2)`` around ``box``'s centre.

    ``sx, sy = sigma_scale * (width, height)`` of ``box`` (which must have an area).

    >>> gaussian_point((5, 10), (0, 0, 10, 20))
    1.0
    """
    x1, y1, x2, y2 = box
    u = (point[0] - (x1 + x2) / 2) / (sigma_scale * (x2 - x1))
    v = (point[1] - (y1 + y2) / 2) / (sigma_scale * (y2 - y1))
    value = math.exp(-0.5 * (u * u + v * v))
    return value if math.isfinite(value) else 0.0


def gaussian_plane(pred: Box, box: Box, sigma_scale: float = DEFAULT_SIGMA_SCALE) -> float:
    """GUI-G2's plane (coverage) reward in [0, 1]: ``exp(-D_B)`` of the two boxes' Gaussians.

    Each box is a Gaussian at its centre with diagonal sigma ``sigma_scale *
    (width, height)``; ``D_B`` is their Bhattacharyya distance,
    ``(1/8) d^T S^-1 d + (1/2) ln(det S / sqrt(det S1 det S2))`` with
    ``S = (S1 + S2) / 2``. A predicted box without area (or inverted) scores 0.0,
    the limit as a box shrinks.

    >>> gaussian_plane((0, 0, 10, 20), (0, 0, 10, 20))
    1.0
    """
    pw, ph = pred[2] - pred[0], pred[3] - pred[1]
    gw, gh = box[2] - box[0], box[3] - box[1]
    if not (pw > 0 and ph > 0):
        return 0.0
    dx = (pred[0] + pred[2]) / 2 - (box[0] + box[2]) / 2
    dy = (pred[1] + pred[3]) / 2 - (box[1] + box[3]) / 2
    s2 = sigma_scale * sigma_scale
    var_x, var_y = s2 * (pw * pw + gw * gw) / 2, s2 * (ph * ph + gh * gh) / 2  # S = (S1 + S2) / 2
    mahalanobis = dx * dx / var_x + dy * dy / var_y
    rx, ry = pw / gw, ph / gh  # det ratio per axis: ((rx + 1/rx) / 2), scale-free
    log_det = math.log((rx + 1 / rx) / 2) + math.log((ry + 1 / ry) / 2)
    value = math.exp(-(mahalanobis / 8 + log_det / 2))
    return value if math.isfinite(value) else 0.0


def gui_point_reward(
    content: str, sol: Any, *, form: str = "point", sigma_scale: float = DEFAULT_SIGMA_SCALE
) -> float:
    """GUI-G2's Gaussian grounding reward in [0, 1] (``both``: [0, 2]) of ``content`` against the box ``sol``.

    The predicted position: an action's point or box, any coordinate key of a
    JSON object, the first ``[x1, y1, x2, y2]``, else the first ``[x, y]``
    (:func:`~skyrl_rewards.rewards.gui.gui_actions.parse_location`). ``form``:
    ``point`` (:func:`gaussian_point` at the point, a box's centre) or
    ``plane`` (:func:`gaussian_plane`; a point answer scores 0.0) or
    ``both`` (their sum, GUI-G2's training reward).
    Coordinates are compared as written (use the ``gui_point`` component for
    a box format). ``ValueError`` naming ``solution`` for a bad target box;
    never raises because of ``content``.

    >>> gui_point_reward("<answer>[0, 0, 10, 20]</answer>", "[0, 0, 10, 20]", form="plane")
    1.0
    """
    return gui_point_score(content, target_box(sol), GuiPointParams(form, sigma_scale)).value


def gui_point_score(
    content: str,
    box: Box,
    params: GuiPointParams = GuiPointParams(),  # noqa: B008 - frozen, immutable
    *,
    convert: Convert | None = None,
) -> ComponentScore:
    """:func:`gui_point_reward` with its outcome; ``unparseable`` (0.0) when no coordinates were read."""
    location = parse_location(content)
    if location is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no point or box in the answer")
    pred_box = location.box
    if pred_box is not None and convert is not None:
        pred_box = convert(pred_box)
    if pred_box is not None and (pred_box[2] < pred_box[0] or pred_box[3] < pred_box[1]):
        return ComponentScore(0.0)  # inverted, as every box reward here
    plane = gaussian_plane(pred_box, box, params.sigma_scale) if pred_box is not None else 0.0
    if params.form == "plane":
        return ComponentScore(plane)
    # a box is converted once (its clamp counted once); the point is its centre
    point = _centre(pred_box) if pred_box is not None else _converted_point(location, convert)
    value = gaussian_point(point, box, params.sigma_scale) if point is not None else 0.0
    return ComponentScore(value + plane if params.form == "both" else value)


class GuiAction(BoxComponent):
    """GUI-R1's action accuracy (:mod:`~skyrl_rewards.rewards.gui.gui`), points converted from the row's box format.

    Parameters: ``radius_px`` (140: hit radius around a target point, in
    original pixels), ``f1_threshold`` (0.5), ``substring_match`` (False:
    GUI-R1's one-word substring rule), ``type_credit`` (0.0: the value of a
    right type with a wrong argument), and the box parameters. Only rows whose
    ground truth is a point action convert positions; in a Qwen family every
    row's image is read, so that one the processor refuses is a dataset error
    for every answer whatever the action.
    """

    name = "gui_action"

    def __init__(
        self,
        radius_px: float = DEFAULT_RADIUS_PX,
        f1_threshold: float = DEFAULT_F1_THRESHOLD,
        substring_match: bool = False,
        type_credit: float = 0.0,
        **box_params: Any,
    ) -> None:
        self.params = GuiActionParams(radius_px, f1_threshold, substring_match, type_credit)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        target = target_action(sample_solution(sample))
        if target.is_located:
            convert = self.converter(sample)
        else:
            self.check_image_seen(sample)
            convert = None
        return note_clamped(
            gui_action_score(content, target, self.params, convert=convert), convert
        )


class GuiPoint(BoxComponent):
    """GUI-G2's Gaussian grounding reward (:mod:`~skyrl_rewards.rewards.gui.gui`), ``form`` point or plane.

    Parameters: ``form`` (``point``: the Gaussian at the predicted point or a
    box's centre; ``plane``: exp(-Bhattacharyya distance) of the predicted
    box's Gaussian and the target's; ``both``: their sum, GUI-G2's recipe),
    ``sigma_scale`` (0.5: GUI-G2's alpha), and the box parameters. The
    solution may be a list (GUI-G2's ``abs_box``).
    """

    name = "gui_point"

    def __init__(
        self, form: str = "point", sigma_scale: float = DEFAULT_SIGMA_SCALE, **box_params: Any
    ) -> None:
        self.params = GuiPointParams(form, sigma_scale)
        super().__init__(**box_params)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        box = target_box(sample_solution(sample))
        convert = self.converter(sample)
        return note_clamped(gui_point_score(content, box, self.params, convert=convert), convert)
