"""The service's JSON: rows in, one result per row out (no Ray, no HTTP here).

The batch route's request is ``{"rows": [ROW, ...]}``; a row is what the pool
scores (``completion``, ``solution`` and the dataset's columns). Each result is
:func:`result_json`: ``value`` (the weighted total, the same float as in
process), ``components``, ``status`` per component, ``masked`` and ``cause``
(the components' errors, ``null`` when none). A request that is not of this
shape raises :class:`BadRequest` naming the field and the row.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from skyrl_rewards.rewards.contract.result import RewardResult


class BadRequest(ValueError):
    """A request body the service cannot read; ``status`` is the HTTP status to answer."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body``; :class:`BadRequest` (400) naming where it breaks."""
    try:
        return json.loads(body.decode("utf-8"))  # bytes to json.loads would also guess UTF-16/32
    except UnicodeDecodeError as error:
        raise BadRequest(f"body: not UTF-8 ({error.reason} at byte {error.start})") from None
    except json.JSONDecodeError as error:
        raise BadRequest(
            f"body: not JSON ({error.msg} at line {error.lineno} column {error.colno})"
        ) from None


def field_of(document: Any, name: str, kind: type, where: str = "body") -> Any:
    """``document[name]``, checked to be a ``kind``; :class:`BadRequest` naming the field."""
    if not isinstance(document, dict):
        raise BadRequest(f"{where}: expected a JSON object, got {type_name(document)}")
    if name not in document:
        raise BadRequest(f"{where}.{name}: missing")
    value = document[name]
    if not isinstance(value, kind):
        raise BadRequest(f"{where}.{name}: expected {_JSON_NAMES[kind]}, got {type_name(value)}")
    return value


_JSON_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}


def type_name(value: Any) -> str:
    """The JSON name of a decoded value's type (``object``, ``array``, ``number``, ...)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    return _JSON_NAMES.get(type(value), type(value).__name__)


def check_row(row: Any, where: str) -> dict[str, Any]:
    """One row to score: an object whose ``completion`` is a string."""
    field_of(row, "completion", str, where)
    return row


def parse_rows(document: Any, *, max_rows: int) -> list[dict[str, Any]]:
    """The rows of a batch request ``{"rows": [...]}``; 413 past ``max_rows``, 400 if malformed."""
    rows = field_of(document, "rows", list)
    check_count(len(rows), max_rows)
    return [check_row(row, f"rows[{index}]") for index, row in enumerate(rows)]


def check_count(count: int, max_rows: int) -> None:
    """:class:`BadRequest` (413) when a request carries more than ``max_rows`` rows."""
    if count > max_rows:
        raise BadRequest(
            f"rows: {count} rows in one request, at most {max_rows}; split the batch", 413
        )


def cause_of(result: RewardResult) -> str | None:
    """Why a row is masked (each failed component and its error), ``None`` when it is not."""
    if not result.should_mask:
        return None
    return (
        "; ".join(
            f"{name}: {result.status.get(name)}: {error}" for name, error in result.errors.items()
        )
        or "masked"
    )


def result_json(result: RewardResult) -> dict[str, Any]:
    """One row's answer: value, components, status, masked and cause."""
    return {
        "value": result.total,
        "components": dict(result.components),
        "status": dict(result.status),
        "masked": result.should_mask,
        "cause": cause_of(result),
    }


def results_json(results: Sequence[RewardResult]) -> list[dict[str, Any]]:
    """:func:`result_json` of each result, in order."""
    return [result_json(result) for result in results]
