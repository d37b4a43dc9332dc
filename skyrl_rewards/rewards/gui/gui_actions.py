"""GUI actions: reading the action a policy wrote and the action a ground truth names.

Model side (never raises; ``None`` when nothing readable), read from the
answer span (the last ``<answer>`` tag, else the whole text), cut to
:data:`MAX_ACTION_CHARS` before any parser runs. Two grammars:

- **JSON / Python-literal actions**, as GUI-R1, AndroidControl, OS-Atlas and
  Qwen2.5-VL computer use write them: ``[{'action': 'click', 'point': [x, y],
  'input_text': '...'}]`` (GUI-R1), ``{"action_type": "click", "x": 1, "y": 2}``
  (AndroidControl), ``{"action": "type", "text": "..."}``,
  ``<tool_call>{"name": "computer_use", "arguments": {"action": "left_click",
  "coordinate": [x, y]}}</tool_call>`` (Qwen2.5-VL); the first action of a list.
- **Function calls**: ``click(100, 200)``, ``click(x=1, y=2)``,
  ``click(start_box='(1,2)')`` (UI-TARS), ``type("hello")``,
  ``scroll(down)``, ``scroll(direction="down")``, ``press_back()``; after the
  last ``Action:`` when there is one; the first call of a known action name,
  else the first call.

Names are compared in canonical form (:func:`canonical_action`): lower case,
spaces and hyphens as underscores, and the few aliases in
:data:`ACTION_ALIASES` (``tap`` and ``left_click`` are ``click``,
``input_text`` is ``type``, ``navigate_back`` is ``press_back``...).

Coordinates are kept as written (the policy's box format); a box written for a
point action counts as its centre.
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.json_extract import parse_json
from skyrl_rewards.rewards.contract.text import answer_span, cap
from skyrl_rewards.rewards.geometry.boxes import Box

MAX_ACTION_CHARS = 4_000
"""The answer span is cut to this length before any action parser runs (an action is short)."""

MAX_COORD_STRING_CHARS = 200
"""A coordinate written as a string (``'(12, 30)'``) is cut to this length before its numbers are read."""

MAX_ACTION_DEPTH = 16
"""JSON deeper than this is not an action: it is refused before a parser (json-repair is slow on it)."""

MAX_CALLS_SCANNED = 32
"""Function calls looked at in one answer before giving up on finding a known action name."""

ACTION_ALIASES = {
    "tap": "click",
    "left_click": "click",
    "left_single": "click",
    "double_tap": "double_click",
    "left_double": "double_click",
    "right_single": "right_click",
    "input": "type",
    "input_text": "type",
    "type_text": "type",
    "navigate_back": "press_back",
    "back": "press_back",
    "navigate_home": "press_home",
    "home": "press_home",
    "press_enter": "enter",
    "open": "open_app",
    "finished": "complete",
    "finish": "complete",
    "done": "complete",
}
"""Names the common GUI datasets and models use for the same action, mapped to one name."""

POINT_ACTIONS = frozenset({"click", "long_press", "double_click", "right_click", "hover"})
"""Actions scored by where they land (GUI-R1: ``click``)."""

TEXT_ACTIONS = frozenset({"type", "select", "open_app"})
"""Actions scored by their text's token F1 (GUI-R1: ``type``, ``select``)."""

DIRECTION_ACTIONS = frozenset({"scroll", "swipe"})
"""Actions scored by their direction (GUI-R1: ``scroll``, through its input text)."""

DIRECTIONS = ("up", "down", "left", "right")

KNOWN_ACTIONS = frozenset(
    {*POINT_ACTIONS, *TEXT_ACTIONS, *DIRECTION_ACTIONS, *ACTION_ALIASES.values()}
    | {"press_back", "press_home", "enter", "complete", "wait", "close/delete", "drag"}
)
"""Canonical names a function-call answer is searched for first."""

_NAME_KEYS = ("action", "action_type")
_WRAPPER_KEYS = ("arguments", "args", "parameters", "params")
_COORD_KEYS = (
    "point",
    "coordinate",
    "coordinates",
    "position",
    "start_box",
    "bbox",
    "bbox_2d",
    "box",
    "location",
)
_TEXT_KEYS = ("text", "input_text", "content", "value", "app_name", "app")
_DIRECTION_KEYS = ("direction",)

_NUMBER = r"-?(?:\d+(?:\.\d+)?|\.\d+)"
_NUMBER_RE = re.compile(_NUMBER)
_CALL = re.compile(r"\b([A-Za-z_][\w/]{0,47})\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)")
_ACTION_MARKER = re.compile(r"action\s*:", re.IGNORECASE)
_DIRECTION_WORD = re.compile(r"\b(up|down|left|right)\b")
_TOOL_CALL_TAG = re.compile(r"</?tool_call>")
_SPACES = re.compile(r"[\s\-]+")


@dataclass(frozen=True)
class Action:
    """One action as written: its canonical name and whatever arguments were readable.

    ``box`` is set when a box was written (``point`` is then its centre);
    coordinates are in the writer's box format.
    """

    name: str
    point: tuple[float, float] | None = None
    box: Box | None = None
    text: str | None = None
    direction: str | None = None


def canonical_action(name: str) -> str:
    """``name`` lower-cased, spaces and hyphens as ``_``, aliases resolved.

    >>> canonical_action("Left-Click")
    'click'
    """
    key = _SPACES.sub("_", name.strip().lower())
    return ACTION_ALIASES.get(key, key)


def canonical_direction(text: str) -> str | None:
    """The one direction word (up, down, left, right) in ``text``; ``None`` for none or several.

    >>> canonical_direction("Scroll DOWN")
    'down'
    """
    found = set(_DIRECTION_WORD.findall(cap(text, MAX_COORD_STRING_CHARS).lower()))
    return found.pop() if len(found) == 1 else None


def parse_action(content: str) -> Action | None:
    """The action in the answer span of ``content``, or ``None`` when none is readable.

    Tries a JSON / Python-literal action first, then a function call. Never raises.

    >>> parse_action("<answer>[{'action': 'click', 'point': [12, 30]}]</answer>").point
    (12.0, 30.0)
    """
    span = _action_span(content)
    if not span:
        return None
    data = _structured(span)
    if data is not None:
        action = _action_from_mapping(data)
        if action is not None:
            return action
    return _action_from_call(span)


def parse_location(content: str) -> Action | None:
    """Where the answer points, as an :class:`Action` with ``point`` (and ``box`` when one was written).

    In order: an action's coordinates (:func:`parse_action`), any coordinate
    key of a JSON object (``{"bbox_2d": [...]}``), the first ``[a, b, c, d]``,
    the first ``[x, y]`` or ``(x, y)``. The name is the action's, or ``""``.
    ``None`` when the answer holds no coordinates. Never raises.

    >>> parse_location("<answer>[10, 20, 30, 40]</answer>").point
    (20.0, 30.0)
    """
    span = _action_span(content)
    if not span:
        return None
    action = parse_action(content)
    if action is not None and action.point is not None:
        return action
    data = _structured(span)
    if data is not None:
        coords = _mapping_coords(data)
        if coords is not None:
            return _located("", coords)
    for count in (4, 2):
        coords = _bracketed(span, count)
        if coords is not None:
            return _located("", coords)
    return None


def _action_span(content: str) -> str:
    if not isinstance(content, str):
        return ""
    span = cap(answer_span(content), MAX_ACTION_CHARS)
    return _TOOL_CALL_TAG.sub(" ", span).strip()


def _structured(span: str) -> Mapping[str, Any] | None:
    """The first dict of the JSON / Python literal from the first ``{`` to the last ``}`` (or the end)."""
    start, end = span.find("{"), span.rfind("}")
    if start == -1 or _depth(span, start) > MAX_ACTION_DEPTH:
        return None
    if end <= start:  # cut short (a length limit): only json-repair can read it
        data: Any = parse_json(span[start:])
    else:
        text = span[start : end + 1]
        data = parse_json(text, repair=False)
        if data is None:
            data = _literal(text)
        if data is None:
            data = parse_json(text)
    while isinstance(data, (list, tuple)) and data:  # "{a}, {b}" reads as a tuple: the first
        data = data[0]
    return data if isinstance(data, dict) else None


def _depth(text: str, start: int) -> int:
    """The deepest bracket nesting from ``start`` on (quotes ignored: an upper bound)."""
    depth = deepest = 0
    for char in text[start:]:
        if char in "{[(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "}])":
            depth -= 1
    return deepest


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


def _action_from_mapping(data: Mapping[str, Any]) -> Action | None:
    for key in _WRAPPER_KEYS:  # {"name": ..., "arguments": {...}}
        inner = data.get(key)
        if isinstance(inner, dict):
            if any(isinstance(inner.get(k), str) for k in _NAME_KEYS):
                return _action_from_mapping(inner)
            if isinstance(data.get("name"), str):
                return _action_from_fields(data["name"], inner)
    name = next((data[k] for k in _NAME_KEYS if isinstance(data.get(k), str)), None)
    if name is None or not name.strip():
        return None
    return _action_from_fields(name, data)


def _action_from_fields(name: str, fields: Mapping[str, Any]) -> Action:
    canonical = canonical_action(name)
    coords = _mapping_coords(fields)
    text = next((fields[k] for k in _TEXT_KEYS if isinstance(fields.get(k), str)), None)
    direction = next((fields[k] for k in _DIRECTION_KEYS if isinstance(fields.get(k), str)), None)
    if direction is None and canonical in DIRECTION_ACTIONS:
        direction = text  # GUI-R1 writes a scroll's direction as its input text
    return _located(canonical, coords, text=text, direction=direction)


def _mapping_coords(fields: Mapping[str, Any]) -> tuple[float, ...] | None:
    for key in _COORD_KEYS:
        coords = coordinates(fields.get(key))
        if coords is not None:
            return coords
    return coordinates((fields.get("x"), fields.get("y")))


def _located(
    name: str,
    coords: tuple[float, ...] | None,
    *,
    text: str | None = None,
    direction: str | None = None,
) -> Action:
    point, box = None, None
    if coords is not None and len(coords) == 4:
        box = (coords[0], coords[1], coords[2], coords[3])
        point = ((coords[0] + coords[2]) / 2, (coords[1] + coords[3]) / 2)
    elif coords is not None:
        point = (coords[0], coords[1])
    if point is not None and not all(math.isfinite(c) for c in point):
        point, box = None, None
    return Action(name, point, box, text, direction)


def coordinates(value: Any) -> tuple[float, ...] | None:
    """``value`` as two (a point) or four (a box) finite numbers, or ``None``.

    Reads a list or tuple (one level of nesting flattened: ``[[x, y]]``,
    ``[(x1, y1), (x2, y2)]``), a ``{"x": .., "y": ..}`` dict or a string
    holding the numbers (``'(12, 30)'``, ``'<|box_start|>(1,2),(3,4)<|box_end|>'``).

    >>> coordinates("[[5, 6]]")
    (5.0, 6.0)
    """
    if isinstance(value, dict):
        value = (value.get("x"), value.get("y"))
    if isinstance(value, str):
        value = [float(n) for n in _NUMBER_RE.findall(cap(value, MAX_COORD_STRING_CHARS))]
    if not isinstance(value, (list, tuple)):
        return None
    flat: list[Any] = []
    for item in value[:8]:
        flat.extend(item[:8] if isinstance(item, (list, tuple)) else [item])
    if len(flat) not in (2, 4):
        return None
    numbers = []
    for item in flat:
        if isinstance(item, bool) or not isinstance(item, (int, float)):
            return None
        try:
            number = float(item)
        except OverflowError:
            return None
        if not math.isfinite(number):
            return None
        numbers.append(number)
    return tuple(numbers)


def _bracketed(span: str, count: int) -> tuple[float, ...] | None:
    """The first ``[n, n(, n, n)]`` (or ``(x, y)`` for a point) of numbers in ``span``."""
    numbers = r"\s*,\s*".join([f"({_NUMBER})"] * count)
    pattern = rf"\[\s*{numbers}\s*\]" if count == 4 else rf"[\[(]\s*{numbers}\s*[\])]"
    match = re.search(pattern, span)
    return coordinates([float(g) for g in match.groups()]) if match else None


def _action_from_call(span: str) -> Action | None:
    markers = list(_ACTION_MARKER.finditer(span))
    if markers:
        span = span[markers[-1].end() :]
    first = None
    for index, match in enumerate(_CALL.finditer(span)):
        if index >= MAX_CALLS_SCANNED:
            break
        action = _call_action(match.group(1), match.group(2))
        if action is None:
            continue
        if action.name in KNOWN_ACTIONS:
            return action
        first = first or action
    return first


def _call_action(name: str, args: str) -> Action | None:
    try:
        call = ast.parse(f"f({args})", mode="eval").body
    except (ValueError, SyntaxError, RecursionError, MemoryError):
        return None
    if not isinstance(call, ast.Call):
        return None
    positional = [_arg_value(node) for node in call.args]
    keywords = {kw.arg: _arg_value(kw.value) for kw in call.keywords if kw.arg is not None}
    canonical = canonical_action(name)
    coords = _mapping_coords(keywords)
    if coords is None:
        numbers = [v for v in positional if isinstance(v, (int, float))]
        coords = coordinates(numbers) if len(numbers) == len(positional) else None
    if coords is None and positional:
        coords = coordinates(positional[0]) if not _is_word(positional[0]) else None
    text = next((keywords[k] for k in _TEXT_KEYS if isinstance(keywords.get(k), str)), None)
    if text is None:
        text = next((v for v in positional if isinstance(v, str)), None)
    direction = next(
        (keywords[k] for k in _DIRECTION_KEYS if isinstance(keywords.get(k), str)), None
    )
    if direction is None and canonical in DIRECTION_ACTIONS:
        direction = text
    return _located(canonical, coords, text=text, direction=direction)


def _is_word(value: Any) -> bool:
    return isinstance(value, str) and _NUMBER_RE.search(value) is None


def _arg_value(node: ast.AST) -> Any:
    if isinstance(node, ast.Name):  # scroll(down): an unquoted word
        return node.id
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return None


@dataclass(frozen=True)
class TargetAction:
    """A ground-truth action: its canonical name and the argument that decides it.

    A point action has ``box`` (hit when strictly inside) or ``point`` with
    ``radius`` (hit when strictly closer; ``None``: the reward's default), in
    original-image pixels.
    """

    name: str
    box: Box | None = None
    point: tuple[float, float] | None = None
    radius: float | None = None
    text: str | None = None
    direction: str | None = None

    @property
    def is_located(self) -> bool:
        """True when scoring it compares a predicted position (a point action)."""
        return self.name in POINT_ACTIONS


TARGET_SCHEMA = (
    '{"action": "click", "bbox": [x1, y1, x2, y2]} | {"action": "click", "point": [x, y], '
    '"radius": r} | {"action": "type", "text": "..."} | {"action": "scroll", "direction": '
    '"down"} | {"action": "press_back"}'
)


def target_action(sol: Any) -> TargetAction:
    """The ground-truth action of a row; ``ValueError`` naming ``solution`` when malformed.

    ``sol`` is a dict or a JSON object (the whole string or its answer span):
    ``action`` (or ``action_type``) names it; a point action (:data:`POINT_ACTIONS`)
    needs ``bbox`` ``[x1, y1, x2, y2]`` with area, or ``point`` ``[x, y]``
    with an optional positive ``radius``; a text action (:data:`TEXT_ACTIONS`)
    needs a non-empty ``text``; a direction action (:data:`DIRECTION_ACTIONS`)
    needs ``direction`` (one of up, down, left, right). GUI-R1's rows
    (``gt_bbox`` of 2 or 4 numbers, ``input_text``, a scroll's direction in
    ``input_text``) read the same way. Fields an action does not use are not checked.

    >>> target_action('{"action": "Tap", "bbox": [0, 0, 10, 10]}').name
    'click'
    """
    data = _solution_mapping(sol)
    name = next((data[k] for k in _NAME_KEYS if k in data), None)
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"solution: no action name (expected {TARGET_SCHEMA}), got {data!r:.120}")
    canonical = canonical_action(name)
    text = next((data[k] for k in ("text", "input_text") if k in data), None)
    if canonical in POINT_ACTIONS:
        return _located_target(canonical, data)
    if canonical in TEXT_ACTIONS:
        if not isinstance(text, str) or not text.strip():
            raise ValueError(
                f"solution: action {name!r} needs a non-empty 'text', got {text!r:.80}"
            )
        return TargetAction(canonical, text=text)
    if canonical in DIRECTION_ACTIONS:
        written = data.get("direction", text)
        direction = canonical_direction(written) if isinstance(written, str) else None
        if direction is None:
            raise ValueError(
                f"solution: action {name!r} needs a 'direction' (one of {', '.join(DIRECTIONS)}), "
                f"got {written!r:.80}"
            )
        return TargetAction(canonical, direction=direction)
    return TargetAction(canonical)


def _solution_mapping(sol: Any) -> Mapping[str, Any]:
    if isinstance(sol, Mapping):
        return sol
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a JSON action object, got {type(sol).__name__}")
    try:
        data = json.loads(answer_span(sol))
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        raise ValueError(
            f"solution: expected a JSON action object ({TARGET_SCHEMA}), got {sol!r:.80}"
        )
    return data


def _located_target(name: str, data: Mapping[str, Any]) -> TargetAction:
    raw = next((data[k] for k in ("bbox", "gt_bbox", "point") if k in data), None)
    coords = coordinates(raw) if not isinstance(raw, str) else None
    if coords is None:
        raise ValueError(
            f"solution: action {name!r} needs 'bbox' [x1, y1, x2, y2] or 'point' [x, y] of "
            f"finite numbers, got {raw!r:.80}"
        )
    if len(coords) == 4:
        box = (coords[0], coords[1], coords[2], coords[3])
        if box[2] <= box[0] or box[3] <= box[1]:
            raise ValueError(
                f"solution: the box {list(box)} has no area (need x1 < x2 and y1 < y2)"
            )
        return TargetAction(name, box=box)
    radius = data.get("radius")
    if radius is not None and not _positive(radius):
        raise ValueError(f"solution: 'radius' must be a positive number, got {radius!r:.80}")
    return TargetAction(name, point=(coords[0], coords[1]), radius=radius)


def _positive(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value)) and value > 0
    except OverflowError:
        return False
