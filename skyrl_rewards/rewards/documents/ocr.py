"""Edit-distance rewards for text read from images: OCR error rates and ANLS.

- ``ocr``: 1 - CER or 1 - WER of the completion's answer span against the
  solution's, clamped to [0, 1] (ROLL's OCR reward is 1 - WER).
- ``anls``: Average Normalized Levenshtein Similarity of one answer, as
  DocVQA and InfographicVQA score it: the best over the gold answers of
  ``1 - NL`` when ``NL < threshold``, else 0.

Both use python-Levenshtein on capped text. Its distance is quadratic in the
worst case and holds the GIL, so a ground truth longer than
:data:`MAX_REFERENCE_CHARS` is a dataset error, and a prediction too long to
score above 0.0 (its length alone puts the distance past the bound) is never
handed to it. What the model wrote never raises: an empty answer scores 0.0
with status ``unparseable``. docs/rewards.md compares these with ROLL,
lmms-eval and the ANLS reference script.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import Levenshtein

from skyrl_rewards.rewards.contract.component_base import (
    Component,
    answer_work_key,
    sample_solution,
)
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span

MAX_REFERENCE_CHARS = 20_000
"""A ground-truth text (after normalisation) longer than this is a dataset error (about 40 ms worst case)."""

OCR_METRICS = ("cer", "wer")
"""Values of the ``ocr`` reward's ``metric``: character or word error rate."""

DEFAULT_ANLS_THRESHOLD = 0.5
"""ANLS's tau: a normalized distance at or above it scores 0 (ST-VQA, DocVQA)."""


def ocr_similarity(
    content: str,
    sol: str,
    *,
    metric: str = "cer",
    lowercase: bool = False,
    collapse_whitespace: bool = True,
) -> float:
    """``1 - CER`` (or ``1 - WER``) of ``content``'s answer span against ``sol``'s, in [0, 1].

    The error rate is the edit distance (characters, or whitespace-separated
    words for ``wer``) divided by the length of the ground truth; past 1 the
    reward is 0.0. Both texts are normalised alike first: lower-cased when
    ``lowercase``, runs of whitespace made one space when
    ``collapse_whitespace`` (answer spans are stripped either way). An empty
    ground truth raises ``ValueError`` naming ``solution``.

    >>> ocr_similarity("<answer>Hello  wrld</answer>", "<answer>Hello world</answer>")
    0.9090909090909091
    """
    return ocr_score(
        content,
        sol,
        metric=metric,
        lowercase=lowercase,
        collapse_whitespace=collapse_whitespace,
    ).value


def ocr_score(
    content: str,
    sol: str,
    *,
    metric: str = "cer",
    lowercase: bool = False,
    collapse_whitespace: bool = True,
) -> ComponentScore:
    """:func:`ocr_similarity` with its outcome: ``unparseable`` when the answer is empty."""
    check_metric(metric)
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a string, got {type(sol).__name__}")
    gold = _reference(normalize(answer_span(sol), lowercase, collapse_whitespace), "text")
    student = normalize(answer_span(content), lowercase, collapse_whitespace)
    if not student:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    gold_units: Sequence[str] = gold.split() if metric == "wer" else gold
    student_units: Sequence[str] = student.split() if metric == "wer" else student
    reference_length = len(gold_units)
    if len(student_units) >= 2 * reference_length:  # the distance is at least the length gap
        return ComponentScore(0.0)
    distance = Levenshtein.distance(student_units, gold_units, score_cutoff=reference_length)
    return ComponentScore(max(0.0, min(1.0, 1 - distance / reference_length)))


def anls(content: str, sol: Any, *, threshold: float = DEFAULT_ANLS_THRESHOLD) -> float:
    """ANLS of ``content``'s answer span against the gold answers of ``sol``, in [0, 1].

    Gold answers: ``sol``'s answer span, one answer or a JSON list of
    answers (``["4 pm", "4:00 pm"]``), or a list of strings. Each side is
    stripped, lower-cased and its whitespace runs made one space; then per
    gold answer ``NL = lev(pred, gold) / max(len(pred), len(gold))``, scoring
    ``1 - NL`` when ``NL < threshold`` else 0; the best over the gold answers.

    >>> anls("<answer>Dear dr. Lobo</answer>", '["Dear Dr. Lobo", "Dr. Lobo"]')
    1.0
    """
    return anls_score(content, sol, threshold=threshold).value


def anls_score(
    content: str, sol: Any, *, threshold: float = DEFAULT_ANLS_THRESHOLD
) -> ComponentScore:
    """:func:`anls` with its outcome: ``unparseable`` when the answer is empty."""
    threshold = check_anls_threshold(threshold)
    golds = gold_answers(sol)
    student = normalize(answer_span(content), lowercase=True, collapse_whitespace=True)
    if not student:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    return ComponentScore(max(_similarity(student, gold, threshold) for gold in golds))


def _similarity(student: str, gold: str, threshold: float) -> float:
    longest = max(len(student), len(gold))
    if abs(len(student) - len(gold)) / longest >= threshold:  # the distance is at least the gap
        return 0.0
    distance = Levenshtein.distance(student, gold, score_cutoff=math.ceil(threshold * longest))
    normalized = distance / longest
    return 1 - normalized if normalized < threshold else 0.0


def gold_answers(sol: Any) -> list[str]:
    """The normalised gold answers of an ANLS ground truth (see :func:`anls`).

    A span that starts with ``[`` is read as a JSON list of strings: a gold
    answer that itself starts with ``[`` is written inside a list. Raises
    ``ValueError`` naming ``solution`` for malformed JSON, an empty list, a
    non-string item, or an answer that is empty or longer than
    :data:`MAX_REFERENCE_CHARS`.

    >>> gold_answers("<answer>[\\"4  PM\\", \\"16:00\\"]</answer>")
    ['4 pm', '16:00']
    """
    if isinstance(sol, str):
        span = answer_span(sol)
        if span.startswith("["):
            try:
                answers = json.loads(span)
            except (json.JSONDecodeError, RecursionError) as error:
                raise ValueError(
                    f"solution: the gold answers are not a JSON list of strings ({error})"
                ) from error
        else:
            answers = [span]
    elif isinstance(sol, (list, tuple)):
        answers = list(sol)
    else:
        raise ValueError(f"solution: expected a string or a list, got {type(sol).__name__}")
    if not isinstance(answers, list) or not answers:
        raise ValueError("solution: expected a non-empty list of gold answers")
    if not all(isinstance(answer, str) for answer in answers):
        raise ValueError(f"solution: every gold answer must be a string, got {answers!r:.80}")
    return [_reference(normalize(answer, True, True), "gold answer") for answer in answers]


def normalize(text: str, lowercase: bool, collapse_whitespace: bool) -> str:
    """``text`` (stripped) lower-cased and with whitespace runs made one space, as asked."""
    if lowercase:
        text = text.lower()
    return " ".join(text.split()) if collapse_whitespace else text.strip()


def check_metric(metric: Any) -> str:
    """``metric`` when it is one of :data:`OCR_METRICS`; else ``ValueError`` naming it."""
    if metric not in OCR_METRICS:
        raise ValueError(f"metric: expected one of {OCR_METRICS}, got {metric!r:.80}")
    return metric


def check_anls_threshold(threshold: Any) -> float:
    """``threshold`` as a float in (0, 1]; else ``ValueError`` naming it."""
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ValueError(f"threshold: expected a number in (0, 1], got {threshold!r:.80}")
    if not 0 < threshold <= 1:
        raise ValueError(f"threshold: expected a number in (0, 1], got {threshold!r}")
    return float(threshold)


def _reference(text: str, what: str) -> str:
    if not text:
        raise ValueError(f"solution: the ground-truth {what} is empty")
    if len(text) > MAX_REFERENCE_CHARS:
        raise ValueError(
            f"solution: the ground-truth {what} has {len(text):,} characters, past the "
            f"{MAX_REFERENCE_CHARS:,}-character cap (edit distance is quadratic)"
        )
    return text


class Ocr(Component):
    """1 - CER (``metric="cer"``, default) or 1 - WER of the answer span (see ocr).

    ``lowercase`` (default False) and ``collapse_whitespace`` (default True)
    normalise both texts first.
    """

    name = "ocr"

    def __init__(
        self, metric: str = "cer", lowercase: bool = False, collapse_whitespace: bool = True
    ) -> None:
        self.metric = check_metric(metric)
        for key, value in (("lowercase", lowercase), ("collapse_whitespace", collapse_whitespace)):
            if not isinstance(value, bool):
                raise ValueError(f"{key}: expected true or false, got {value!r:.80}")
        self.lowercase = lowercase
        self.collapse_whitespace = collapse_whitespace

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return ocr_score(
            content,
            sample_solution(sample),
            metric=self.metric,
            lowercase=self.lowercase,
            collapse_whitespace=self.collapse_whitespace,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return answer_work_key(self.name, sample)


class Anls(Component):
    """ANLS against the row's gold answers (one, or a JSON list; see ocr), ``threshold`` 0.5."""

    name = "anls"

    def __init__(self, threshold: float = DEFAULT_ANLS_THRESHOLD) -> None:
        self.threshold = check_anls_threshold(threshold)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return anls_score(content, sample_solution(sample), threshold=self.threshold)

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return answer_work_key(self.name, sample)
