"""Reading a judge's reply as a reward in [0, 1].

Parsers (``parser`` of a judge; a name or a mapping with ``kind``):

- ``binary``: the whole reply, stripped, read as a float as VLM-R1 reads it
  (``float(reply.strip())``), and it must be exactly 1.0 or 0.0 (``"1"``,
  ``"1.0"``, ``" 0.0\\n"``). VLM-R1 would also take ``"0.5"`` or ``"nan"``;
  here those are unparseable.
- ``scale`` {lo, hi}: the whole reply, stripped (a trailing ``.`` allowed),
  a number in [lo, hi], normalised to ``(x - lo) / (hi - lo)``.
- ``regex`` {pattern, group (default 1), lo, hi, values}: the first match of
  ``pattern`` in the reply; its group read through ``values`` (a mapping from
  the captured text, lower-cased, to a number) when given, else as a number
  in [lo, hi] (default [0, 1]), normalised.
- ``json`` {field, lo, hi, values}: the first JSON object in the reply (the
  whole reply, a fenced block, or the text from its first ``{`` to its last
  ``}``); ``field`` (dots for nested keys) read as a number in [lo, hi], a
  boolean (true: 1.0) or a string through ``values``.

A reply that does not parse raises :class:`UnparseableVerdict` (a
``ValueError``): the judge component masks the row, never scores it 0.0.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from skyrl_rewards.rewards.contract.json_extract import json_block, parse_json
from skyrl_rewards.rewards.contract.text import cap

MAX_VERDICT_CHARS = 20_000
"""A judge reply is cut to this many characters before any parser reads it."""

PARSER_KINDS = ("binary", "scale", "regex", "json")


class UnparseableVerdict(ValueError):
    """The judge's reply is not a verdict this parser can read."""


@dataclass(frozen=True)
class Verdict:
    """A parser: ``kind`` and its settings. :meth:`read` gives a value in [0, 1].

    >>> Verdict.from_config("binary").read(" 1.0 ")
    1.0
    >>> Verdict.from_config({"kind": "scale", "lo": 0, "hi": 10}).read("7")
    0.7
    """

    kind: str = "binary"
    lo: float = 0.0
    hi: float = 1.0
    pattern: str = ""
    group: int | str = 1
    field: str = ""
    values: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @classmethod
    def from_config(cls, config: Any = None) -> Verdict:
        """A parser from a name or ``{kind, ...}``; ``ValueError`` naming the bad setting."""
        if config is None:
            config = "binary"
        if isinstance(config, str):
            config = {"kind": config}
        if not isinstance(config, Mapping):
            raise ValueError(f"parser: expected a name or a mapping, got {config!r:.80}")
        settings = dict(config)
        kind = settings.pop("kind", None)
        if kind not in PARSER_KINDS:
            raise ValueError(f"parser.kind: expected one of {PARSER_KINDS}, got {kind!r}")
        allowed = {
            "binary": set(),
            "scale": {"lo", "hi"},
            "regex": {"pattern", "group", "lo", "hi", "values"},
            "json": {"field", "lo", "hi", "values"},
        }[kind]
        unknown = sorted(set(settings) - allowed)
        if unknown:
            raise ValueError(
                f"parser: unknown settings {unknown} for kind {kind!r}; expected some of {sorted(allowed)}"
            )
        if kind == "scale" and not {"lo", "hi"} <= set(settings):
            raise ValueError("parser: kind 'scale' needs lo and hi")
        verdict = cls(kind=kind, **settings)
        verdict._check()
        return verdict

    def _check(self) -> None:
        for name in ("lo", "hi"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
            ):
                raise ValueError(f"parser.{name}: expected a number, got {value!r}")
        if self.hi <= self.lo:
            raise ValueError(f"parser: expected lo < hi, got lo={self.lo!r}, hi={self.hi!r}")
        if self.kind == "regex":
            try:
                compiled = re.compile(self.pattern)
            except (re.error, TypeError) as error:
                raise ValueError(f"parser.pattern: not a regular expression ({error})") from error
            if not self.pattern:
                raise ValueError("parser.pattern: expected a non-empty regular expression")
            if isinstance(self.group, int) and not 0 <= self.group <= compiled.groups:
                raise ValueError(
                    f"parser.group: the pattern has {compiled.groups} groups, got {self.group!r}"
                )
            if isinstance(self.group, str) and self.group not in compiled.groupindex:
                raise ValueError(f"parser.group: the pattern has no group named {self.group!r}")
        if self.kind == "json" and (not isinstance(self.field, str) or not self.field):
            raise ValueError(
                "parser.field: expected the name of a field of the reply's JSON object"
            )
        for key, value in dict(self.values).items():
            if (
                not isinstance(key, str)
                or isinstance(value, bool)
                or not isinstance(value, (int, float))
            ):
                raise ValueError(f"parser.values: expected text -> number, got {key!r}: {value!r}")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"parser.values.{key}: expected a value in [0, 1], got {value!r}")

    def read(self, reply: str) -> float:
        """The reply's value in [0, 1]; :class:`UnparseableVerdict` when it does not parse."""
        text = cap(reply if isinstance(reply, str) else "", MAX_VERDICT_CHARS)
        if self.kind == "binary":
            value = _number(text.strip())
            if value not in (0.0, 1.0):
                raise UnparseableVerdict(f"expected exactly 1.0 or 0.0, got {_show(text)}")
            return value
        if self.kind == "scale":
            return self._scaled(_number(text.strip().rstrip(".")), text)
        if self.kind == "regex":
            match = re.search(self.pattern, text)
            captured = match.group(self.group) if match else None
            if captured is None:
                raise UnparseableVerdict(f"pattern {self.pattern!r} does not match {_show(text)}")
            return self._term(captured, text)
        return self._json_field(text)

    def _json_field(self, text: str) -> float:
        data = None
        for candidate in (text.strip(), json_block(text), _braced(text)):
            if candidate:
                data = parse_json(candidate, repair=False)
                if isinstance(data, dict):
                    break
        if not isinstance(data, dict):
            raise UnparseableVerdict(f"no JSON object in {_show(text)}")
        value: Any = data
        for key in self.field.split("."):
            if not isinstance(value, dict) or key not in value:
                raise UnparseableVerdict(
                    f"the JSON object has no field {self.field!r}: {_show(text)}"
                )
            value = value[key]
        if isinstance(value, bool):
            return 1.0 if value else 0.0
        if isinstance(value, (int, float)):
            return self._scaled(float(value), text)
        if isinstance(value, str):
            return self._term(value, text)
        raise UnparseableVerdict(f"field {self.field!r} is {value!r:.80}, not a number or text")

    def _term(self, captured: str, text: str) -> float:
        if self.values:
            values = {key.lower(): float(v) for key, v in self.values.items()}
            key = captured.strip().lower()
            if key not in values:
                raise UnparseableVerdict(f"{captured!r:.80} is none of {sorted(values)}")
            return values[key]
        return self._scaled(_number(captured.strip()), text)

    def _scaled(self, value: float | None, text: str) -> float:
        if value is None or not self.lo <= value <= self.hi:
            raise UnparseableVerdict(
                f"expected a number in [{self.lo:g}, {self.hi:g}], got {_show(text)}"
            )
        return (value - self.lo) / (self.hi - self.lo)


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _braced(text: str) -> str | None:
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else None


def _show(text: str) -> str:
    return repr(text[:120] + ("..." if len(text) > 120 else ""))
