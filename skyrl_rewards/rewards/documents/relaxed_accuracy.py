"""ChartQA's relaxed accuracy: a numeric answer within 5% of the gold, any other exactly equal.

The rules are lmms-eval's ``relaxed_correctness`` (``tasks/chartqa/utils.py``,
taken from Qwen-VL's ``eval_mm/evaluate_vqa.py``), after the ChartQA paper
(Masry et al. 2022, section 5.1, following Methani et al. 2020):

- each text is read as a number by Python's ``float``; one ending in ``%``
  is that number (trailing ``%`` removed) divided by 100;
- when the prediction reads as a number and the gold as a non-zero one, the
  answer is right when ``|pred - gold| / |gold| <= max_relative_change``
  (0.05);
- otherwise right when the two texts are equal ignoring case.

The prediction is the completion's answer span (the last ``<answer>``, else
the whole text), stripped; the gold is the solution's answer span, or
several (a JSON list, or a list column: the best counts, as Qwen-VL scores
its annotations). The reward is 1.0 or 0.0. An empty answer scores 0.0 with
status ``unparseable``; a malformed gold is a dataset error naming ``solution``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import Any

from skyrl_rewards.rewards.contract.component_base import (
    Component,
    answer_work_key,
    sample_solution,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span
from skyrl_rewards.rewards.documents.ocr import MAX_REFERENCE_CHARS, gold_answer_texts

DEFAULT_MAX_RELATIVE_CHANGE = 0.05
"""ChartQA's tolerance: a numeric answer within 5% of the gold is right."""


def relaxed_accuracy(
    content: str, sol: Any, *, max_relative_change: float = DEFAULT_MAX_RELATIVE_CHANGE
) -> float:
    """1.0 when ``content``'s answer is relaxed-correct for a gold answer of ``sol``, else 0.0.

    >>> relaxed_accuracy("<answer>41.5</answer>", "<answer>43</answer>")
    1.0
    >>> relaxed_accuracy("<answer>12%</answer>", "0.125"), relaxed_accuracy("Paris", "paris")
    (1.0, 1.0)
    """
    return relaxed_accuracy_score(content, sol, max_relative_change=max_relative_change).value


def relaxed_accuracy_score(
    content: str, sol: Any, *, max_relative_change: float = DEFAULT_MAX_RELATIVE_CHANGE
) -> ComponentScore:
    """:func:`relaxed_accuracy` with its outcome: ``unparseable`` when the answer is empty."""
    tolerance = check_max_relative_change(max_relative_change)
    golds = [_gold(gold) for gold in gold_answer_texts(sol)]
    prediction = answer_span(content)
    if not prediction:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    right = any(relaxed_correct(prediction, gold, tolerance) for gold in golds)
    return ComponentScore(1.0 if right else 0.0)


def relaxed_correct(prediction: str, target: str, max_relative_change: float) -> bool:
    """ChartQA's relaxed correctness of one prediction against one gold answer (module docstring)."""
    predicted, gold = as_number(prediction), as_number(target)
    if predicted is not None and gold:  # a gold of 0 (or one that is no number) compares as text
        return abs(predicted - gold) / abs(gold) <= max_relative_change
    return prediction.lower() == target.lower()


def as_number(text: str) -> float | None:
    """``text`` as Python's ``float`` reads it (a trailing ``%`` divides by 100), else ``None``.

    >>> as_number("12.5%"), as_number(" 1_000 "), as_number("1,000")
    (0.125, 1000.0, None)
    """
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


class RelaxedAccuracy(Component):
    """ChartQA's relaxed accuracy of the answer span (module docstring), ``max_relative_change`` 0.05."""

    name = "relaxed_accuracy"

    def __init__(self, max_relative_change: float = DEFAULT_MAX_RELATIVE_CHANGE) -> None:
        self.max_relative_change = check_max_relative_change(max_relative_change)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return relaxed_accuracy_score(
            content, sample_solution(sample), max_relative_change=self.max_relative_change
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return answer_work_key(self.name, sample)


def check_max_relative_change(value: Any) -> float:
    """``value`` as a float when it is a finite number >= 0; else ``ValueError`` naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"max_relative_change: expected a number >= 0, got {value!r:.80}")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"max_relative_change: expected a number >= 0, got {value!r}")
    return float(value)


def _gold(text: str) -> str:
    """A gold answer, stripped; ``ValueError`` naming ``solution`` when empty or too long."""
    text = text.strip()
    if not text:
        raise ValueError("solution: a gold answer is empty")
    if len(text) > MAX_REFERENCE_CHARS:
        raise ValueError(
            f"solution: a gold answer has {len(text):,} characters, past the "
            f"{MAX_REFERENCE_CHARS:,}-character cap"
        )
    return text
