"""The pre-screen of a math answer, before anything is parsed: :func:`too_complex`.

Answers nested deeper than :data:`MAX_MATH_NESTING`, holding a power of
numbers with :data:`MAX_POWER_DIGITS` digits or more, or the factorial of a
large number (:data:`MAX_FACTORIAL_ARGUMENT`), or longer than
:data:`MAX_MATH_CHARS` (memory only) are refused; a numeric exponent or
factorial argument is evaluated (bounded, in floating point, by a small
arithmetic parser) to tell ``(1.025)^{4 \\cdot 5}`` from
``10^{99 \\cdot 99 \\cdot 99}``. Pure functions, no math-verify: see
:mod:`~skyrl_rewards.rewards.text.math_check`.
"""

from __future__ import annotations

import math
import re

MAX_MATH_CHARS = 50_000
"""Answers longer than this (either side) are not parsed symbolically (memory; real answers are a few KB)."""


MAX_MATH_NESTING = 40
"""Answers with deeper ``{``/``(``/``[`` nesting are not parsed symbolically."""


MAX_POWER_DIGITS = 100_000
"""A power of numbers is refused when its value would have this many digits or more.

Digits are ``|exponent| * max(1, log10|base|)``; a base that is not a plain
number (``x``, ``\\left(1.025\\right)``) counts as 10, so ``x^{99999}`` passes
and ``x^{100000}`` does not, as before; ``2^{2023}`` and ``(1.025)^{4 \\cdot 5}``
pass, ``10^{99 \\cdot 99 \\cdot 99}`` and ``(10^{99999})^{99999}`` do not.
"""


MAX_FACTORIAL_ARGUMENT = 1_000
"""A factorial of a number this large or larger is refused (``1000!`` has 2,568 digits)."""


_BIG_FACTORIAL = re.compile(r"\d{4,}\s*!")


_BARE_TOWER = re.compile(r"\d\s*\^\s*\d+\s*\^")


_NUMERIC_OPERAND = re.compile(r"^[\d\s.+\-*/^(){}]*$")


_NUMERIC_TOKEN = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+|[-+*/^(){}])")


_PRODUCT_WORDS = re.compile(r"\\(?:cdot|times)")


_BRACKETS = {"{": "}", "(": ")"}


_OPENING = {"}": "{", ")": "("}


MAX_OPERAND_CHARS = 1_000
"""Exponents, bases and factorial arguments longer than this are not evaluated (see too_complex)."""


def too_complex(text: str) -> bool:
    """Whether ``text`` is past the memory cap, too deep, or a known way to make SymPy build a giant number.

    Refused: a power of numbers whose value would have :data:`MAX_POWER_DIGITS`
    digits or more (``9^{9^9}``, ``9^{(9^9)}``, ``10^{99*99*99}``,
    ``10^{1000000}``), a bare tower ``9^9^9``; a factorial of a number of
    :data:`MAX_FACTORIAL_ARGUMENT` or more, written or computed (``5000!``,
    ``(10^{100})!``), or of a bracketed group that is not plain arithmetic and
    holds a power, product or factorial (``(999!)!``). A numeric exponent is
    evaluated, so worked answers such as ``(1.025)^{4 \\cdot 5}`` pass;
    symbolic exponents (``e^{-x^2}``) pass.
    """
    if len(text) > MAX_MATH_CHARS or _nesting(text) > MAX_MATH_NESTING:
        return True
    text = _PRODUCT_WORDS.sub("*", text)
    if _BIG_FACTORIAL.search(text) or _BARE_TOWER.search(text):
        return True
    if "^" not in text and "!" not in text:
        return False
    pairs = _bracket_pairs(text)
    for index, char in enumerate(text):
        if char == "^" and _explosive_power(text, index, pairs):
            return True
        if char == "!" and _explosive_factorial(text, index, pairs):
            return True
    return False


def _nesting(text: str) -> int:
    depth = deepest = 0
    for char in text:
        if char in "{([":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "})]":
            depth = max(0, depth - 1)
    return deepest


def _explosive_power(text: str, caret: int, pairs: dict[int, int]) -> bool:
    """Whether the power at ``text[caret] == "^"`` would have :data:`MAX_POWER_DIGITS` digits or more."""
    start, end = _operand_after(text, caret + 1, pairs)
    if end - start > MAX_OPERAND_CHARS:  # plain arithmetic this long is no small exponent
        return bool(_NUMERIC_OPERAND.match(text[start : start + MAX_OPERAND_CHARS]))
    operand = text[start:end]
    if operand and operand[0] in _BRACKETS and start not in pairs:  # unclosed: read to the end
        operand += _BRACKETS[operand[0]]
    exponent = _numeric_value(operand)
    if exponent is None:
        return False
    start, end = _base_before(text, caret, pairs)
    base = _numeric_value(text[start:end]) if end - start <= MAX_OPERAND_CHARS else None
    base_digits = math.log10(abs(base)) if base is not None and base != 0 else 1.0
    return abs(exponent) * max(1.0, base_digits) >= MAX_POWER_DIGITS


def _explosive_factorial(text: str, bang: int, pairs: dict[int, int]) -> bool:
    start, end = _group_before(text, bang, pairs)
    if end - start <= 1:
        return False
    operand = text[start : min(end, start + MAX_OPERAND_CHARS)]
    value = _numeric_value(operand) if end - start <= MAX_OPERAND_CHARS else None
    if value is not None:
        return abs(value) >= MAX_FACTORIAL_ARGUMENT
    return bool(re.search(r"[\^*!]|\d{4,}", operand))


def _bracket_pairs(text: str) -> dict[int, int]:
    """Index of each ``{``/``(`` to that of the bracket of its kind that closes it, and back."""
    open_at: dict[str, list[int]] = {"{": [], "(": []}
    pairs: dict[int, int] = {}
    for index, char in enumerate(text):
        if char in open_at:
            open_at[char].append(index)
        elif char in _OPENING:
            stack = open_at[_OPENING[char]]
            if stack:
                opening = stack.pop()
                pairs[opening], pairs[index] = index, opening
    return pairs


def _operand_after(text: str, start: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group (to the end if unclosed) or run of digits at ``start`` (after spaces)."""
    while start < len(text) and text[start].isspace():
        start += 1
    if start < len(text) and text[start] in _BRACKETS:
        return start, pairs[start] + 1 if start in pairs else len(text)
    end = start
    while end < len(text) and text[end].isdigit():
        end += 1
    return start, end


def _group_before(text: str, end: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group that ends just before ``end`` (after spaces); empty if none."""
    while end > 0 and text[end - 1].isspace():
        end -= 1
    if end == 0 or end - 1 not in pairs or text[end - 1] not in _OPENING:
        return end, end
    return pairs[end - 1], end


def _base_before(text: str, caret: int, pairs: dict[int, int]) -> tuple[int, int]:
    """Span of the bracketed group or run of digits (with its decimal point) that ends before ``caret``."""
    start, end = _group_before(text, caret, pairs)
    if end > start:
        return start, end
    while start > 0 and (text[start - 1].isdigit() or text[start - 1] == "."):
        start -= 1
    return start, end


def _numeric_value(operand: str) -> float | None:
    """``operand`` evaluated as plain arithmetic, ``inf`` past float range; ``None`` if not arithmetic.

    Numbers, ``+ - * / ^``, brackets and juxtaposition (a product); no names.
    Evaluated in floating point, so the cost is linear in the operand whatever
    the number it denotes.
    """
    if not operand or not _NUMERIC_OPERAND.match(operand) or not any(c.isdigit() for c in operand):
        return None
    tokens = _NUMERIC_TOKEN.findall(operand)
    if "".join(tokens) != "".join(operand.split()):
        return None
    parser = _Arithmetic(tokens)
    try:
        value = parser.sum()
    except (ValueError, ZeroDivisionError):
        return None
    except RecursionError:  # a tower too deep to evaluate is too deep for SymPy too
        return math.inf
    return value if parser.done() else None


class _Arithmetic:
    """A recursive-descent evaluator over the tokens of a numeric operand (depth bounded by nesting)."""

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0

    def done(self) -> bool:
        return self.position == len(self.tokens)

    def _peek(self) -> str:
        return self.tokens[self.position] if self.position < len(self.tokens) else ""

    def _take(self) -> str:
        token = self._peek()
        if not token:
            raise ValueError("unexpected end")
        self.position += 1
        return token

    def sum(self) -> float:
        value = self.product()
        while self._peek() in ("+", "-"):
            right = self.product() if self._take() == "+" else -self.product()
            value = _finite_or_inf(value + right)
        return value

    def product(self) -> float:
        value = self.unary()
        while self._peek() and self._peek() not in "+-)}":
            if self._peek() == "/":
                self._take()
                value = _finite_or_inf(value / self.unary())
            else:
                if self._peek() == "*":
                    self._take()
                value = _finite_or_inf(value * self.unary())
        return value

    def unary(self) -> float:
        sign = 1.0
        while self._peek() in ("+", "-"):
            sign = -sign if self._take() == "-" else sign
        return sign * self.power()

    def power(self) -> float:
        base = self.atom()
        if self._peek() != "^":
            return base
        self._take()
        exponent = self.unary()
        return _power(base, exponent)

    def atom(self) -> float:
        token = self._take()
        if token in _BRACKETS:
            value = self.sum()
            if self._take() != _BRACKETS[token]:
                raise ValueError("unbalanced bracket")
            return value
        if token[0].isdigit() or token[0] == ".":
            return float(token)
        raise ValueError(f"unexpected {token!r}")


def _finite_or_inf(value: float) -> float:
    return value if not math.isnan(value) else math.inf


def _power(base: float, exponent: float) -> float:
    """``|base| ** exponent`` with the sign of an odd integer power, ``inf`` past float range."""
    if math.isinf(base) or math.isinf(exponent):
        return math.inf
    if base == 0:
        if exponent < 0:
            raise ZeroDivisionError("0 to a negative power")
        return 0.0
    try:
        magnitude = abs(base) ** exponent
    except OverflowError:
        return math.inf
    odd = exponent.is_integer() and int(exponent) % 2 == 1
    return -magnitude if base < 0 and odd else magnitude
