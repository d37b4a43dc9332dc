"""Answer accuracy: VLM-R1's default accuracy reward and its per-row methods.

Each ``*_score`` function returns a :class:`ComponentScore` (value plus
outcome); the public ``*_reward`` functions return just the float. They never
raise because of what the model wrote; they raise :class:`ValueError` when the
ground truth itself is unusable.

This module sits above the family folders, beside the registry, and stays
there: a row's ``accu_reward_method`` picks math or choice checking
(``text``), COCO mAP or detection (``boxes``) or a judge (``models``), so the
accuracy reward and the length shaping that depends on it (:class:`Length`)
are the one place that reads across families.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable, Mapping
from typing import Any

import Levenshtein

from skyrl_rewards.rewards.boxes.coco_map import MAP_METHODS, coco_map_score
from skyrl_rewards.rewards.contract.component_base import Component, sample_solution, work_digest
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelOutcome, ModelRequest
from skyrl_rewards.rewards.contract.result import ComponentScore, Status
from skyrl_rewards.rewards.contract.text import answer_span, cap, clean, completion_text
from skyrl_rewards.rewards.text.choice import extract_choice
from skyrl_rewards.rewards.text.math_check import DEFAULT_TIMEOUT_S, MathGuard, check_equal
from skyrl_rewards.rewards.text.math_children import MathStatus
from skyrl_rewards.rewards.text.shaping import CosineSchedule, cosine_reward, load_tokenizer

MAX_FUZZY_CHARS = 5_000
"""Both sides of a Levenshtein ratio are cut to this length (the ratio is quadratic)."""

ACCURACY_METHODS = (
    "default",
    "mcq",
    "yes_no",
    "all_match",
    "weighted_sum",
    "math",
    *MAP_METHODS,
    "llm",
)
"""Values of the per-row ``accu_reward_method`` column."""

LLM_NEEDS_JUDGE = (
    "accu_reward_method: 'llm' asks a chat-model judge, and none is configured; set "
    "rewards.accuracy.judge (endpoint base_url and model; see docs/judges.md)"
)
"""Why an ``llm`` row cannot be scored by rules (it is masked, never scored by string equality)."""

_YES_NO = re.compile(r"(yes|no)")


def default_accuracy_reward(content: str, sol: str, **kwargs: Any) -> float:
    """VLM-R1's default accuracy reward in [0, 1] (SPEC, ``default_accuracy_reward``).

    Symbolic equality with math-verify first (gold first); then, when the
    ground truth has a digit, float equality or a Levenshtein ratio; when it
    is a choice letter, letter equality; otherwise a Levenshtein ratio.
    kwargs ``math_guard`` and ``math_timeout_s`` choose how math-verify's time
    is bounded (see :mod:`skyrl_rewards.rewards.text.math_check`); others are ignored.

    >>> default_accuracy_reward("<answer>\\\\frac{1}{2}</answer>", "<answer>0.5</answer>")
    1.0
    """
    return default_accuracy_score(
        content,
        sol,
        guard=kwargs.get("math_guard"),
        timeout_s=kwargs.get("math_timeout_s", DEFAULT_TIMEOUT_S),
    ).value


def default_accuracy_score(
    content: str,
    sol: str,
    *,
    guard: MathGuard | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ComponentScore:
    """:func:`default_accuracy_reward` with its outcome.

    Status ``unparseable`` when the student answer is empty or too long or
    complex for math-verify; ``timeout`` when math-verify used more than
    ``timeout_s`` seconds of CPU time; ``error`` when its process died. In
    those cases the value is what the string branches give, and ``error`` says
    why.
    """
    gold = _gold_span(sol)
    student = answer_span(content) if isinstance(content, str) else ""
    if not student:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    outcome = check_equal(gold, student, guard=guard, timeout_s=timeout_s)
    if outcome is MathStatus.EQUAL:
        return ComponentScore(1.0)
    value = _string_accuracy(student, gold)
    if outcome is MathStatus.NOT_EQUAL:
        return ComponentScore(value)
    return ComponentScore(value, *_gave_up(outcome, timeout_s))


def _gave_up(outcome: MathStatus, timeout_s: float) -> tuple[Status, str]:
    """Status and message for a symbolic check that could not judge."""
    if outcome is MathStatus.TIMEOUT:
        return Status.TIMEOUT, f"math-verify timed out after {timeout_s:g} s of CPU time"
    if outcome is MathStatus.CRASHED:
        return Status.ERROR, "math-verify's process died or could not start"
    return Status.UNPARSEABLE, "answer too long or too complex for math-verify"


def _string_accuracy(student: str, gold: str) -> float:
    student_clean, gold_clean = clean(student), clean(gold)
    if any(char.isdigit() for char in gold):
        student_number, gold_number = _as_float(student_clean), _as_float(gold_clean)
        if student_number is not None and gold_number is not None:
            return 1.0 if student_number == gold_number else 0.0
        return fuzzy_ratio(student_clean, gold_clean)
    gold_choice = extract_choice(gold)
    if gold_choice is not None:
        return 1.0 if extract_choice(student) == gold_choice else 0.0
    return fuzzy_ratio(student_clean, gold_clean)


def fuzzy_ratio(student: str, gold: str) -> float:
    """Levenshtein ratio of the two strings, each capped; 0.0 for an empty student answer."""
    if not student:
        return 0.0
    return float(Levenshtein.ratio(cap(student, MAX_FUZZY_CHARS), cap(gold, MAX_FUZZY_CHARS)))


def _as_float(text: str) -> float | None:
    try:
        return float(text)
    except (ValueError, OverflowError):
        return None


def _gold_span(sol: Any) -> str:
    if not isinstance(sol, str):
        raise ValueError(f"solution: expected a string, got {type(sol).__name__}")
    gold = answer_span(sol)
    if not clean(gold):
        raise ValueError(f"solution: the ground-truth answer is empty ({sol!r:.80})")
    return gold


def mcq_score(content: str, sol: str) -> ComponentScore:
    """1.0 when the student's choice letter equals the ground truth's letter."""
    gold = _gold_span(sol)
    gold_choice = extract_choice(gold) or gold.strip().upper()
    student_choice = extract_choice(answer_span(content))
    if student_choice is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no choice letter in the answer")
    return ComponentScore(1.0 if student_choice == gold_choice else 0.0)


def yes_no_score(content: str, sol: str) -> ComponentScore:
    """1.0 when the first yes/no of the student answer equals the ground truth's.

    As in the reference, both texts are lower-cased before their answer spans
    are found (so ``<ANSWER>`` tags count here). Unlike the reference, an
    answer with neither word scores 0.0 (the reference pays 1.0 when both
    sides lack one), and a ground truth with neither word is a dataset error.
    """
    gold = _YES_NO.search(_gold_span(sol.lower() if isinstance(sol, str) else sol))
    if gold is None:
        raise ValueError("solution: a yes_no ground truth must contain 'yes' or 'no'")
    student = _YES_NO.search(answer_span(content.lower() if isinstance(content, str) else ""))
    if student is None:
        return ComponentScore(0.0, Status.UNPARSEABLE, "no yes/no in the answer")
    return ComponentScore(1.0 if student.group(1) == gold.group(1) else 0.0)


def all_match_score(content: str, sol: str) -> ComponentScore:
    """1.0 when the cleaned answer equals the cleaned ground truth exactly."""
    gold = clean(_gold_span(sol))
    return ComponentScore(1.0 if clean(content) == gold else 0.0)


def math_score(
    content: str,
    sol: str,
    *,
    guard: MathGuard | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ComponentScore:
    """1.0 when math-verify finds the answer equal to the ground truth, else 0.0 (no string fallback)."""
    gold = _gold_span(sol)
    student = answer_span(content)
    if not student:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    outcome = check_equal(gold, student, guard=guard, timeout_s=timeout_s)
    if outcome is MathStatus.EQUAL:
        return ComponentScore(1.0)
    if outcome is MathStatus.NOT_EQUAL:
        return ComponentScore(0.0)
    return ComponentScore(0.0, *_gave_up(outcome, timeout_s))


def weighted_sum_score(content: str, sol: str) -> ComponentScore:
    """Detection score of the answer, with the reference's "none" rule.

    When the cleaned ground truth is ``none`` (nothing to detect), 1.0 iff the
    cleaned answer is ``none`` too.
    """
    from skyrl_rewards.rewards.boxes.detection import detection_score_with_status

    if clean(_gold_span(sol)) == "none":
        return ComponentScore(1.0 if clean(content) == "none" else 0.0)
    return detection_score_with_status(content, sol)


def accuracy_score(
    content: str,
    sol: str,
    method: str | None = None,
    *,
    guard: MathGuard | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ComponentScore:
    """Dispatch on ``method`` (a value of ``accu_reward_method``; ``None`` means default)."""
    method = method or "default"
    if method == "llm":
        raise ValueError(LLM_NEEDS_JUDGE)
    scorers: dict[str, Callable[[], ComponentScore]] = {
        "default": lambda: default_accuracy_score(content, sol, guard=guard, timeout_s=timeout_s),
        "mcq": lambda: mcq_score(content, sol),
        "yes_no": lambda: yes_no_score(content, sol),
        "all_match": lambda: all_match_score(content, sol),
        "weighted_sum": lambda: weighted_sum_score(content, sol),
        "math": lambda: math_score(content, sol, guard=guard, timeout_s=timeout_s),
        **{name: functools.partial(coco_map_score, content, sol, name) for name in MAP_METHODS},
    }
    if method not in scorers:
        raise ValueError(
            f"accu_reward_method: unknown method {method!r}; expected one of {ACCURACY_METHODS}"
        )
    return scorers[method]()


class Accuracy(Component):
    """Answer accuracy, dispatched on the row's ``accu_reward_method`` (default: ``default``).

    Rows whose method is ``llm`` are scored by a chat-model judge (``judge``:
    the parameters of a :class:`~skyrl_rewards.rewards.models.judge.Judge`,
    whose template defaults to VLM-R1's ``llm`` prompt and parser to
    ``binary``) through the judge lane; without ``judge`` such a row is a
    configuration error (masked), never a string comparison.
    """

    name = "accuracy"

    def __init__(
        self,
        math_guard: MathGuard | None = None,
        math_timeout_s: float = DEFAULT_TIMEOUT_S,
        judge: Mapping[str, Any] | None = None,
    ) -> None:
        if math_guard not in (None, "subprocess", "inline"):
            raise ValueError(f"math_guard: expected 'subprocess' or 'inline', got {math_guard!r}")
        if not isinstance(math_timeout_s, (int, float)) or math_timeout_s <= 0:
            raise ValueError(f"math_timeout_s: expected a positive number, got {math_timeout_s!r}")
        self.math_guard = math_guard
        self.math_timeout_s = float(math_timeout_s)
        self.judge: Component | None = None
        if judge is not None:
            if not isinstance(judge, Mapping):
                raise ValueError(f"judge: expected the judge's parameters, got {judge!r:.80}")
            from skyrl_rewards.rewards.models.judge import Judge

            try:
                self.judge = Judge(**judge)
            except TypeError as error:
                raise ValueError(f"judge: bad parameters: {error}") from error
            except ValueError as error:
                raise ValueError(f"judge.{error}") from error

    def _judged(self, sample: Mapping[str, Any]) -> bool:
        return self.judge is not None and sample.get("accu_reward_method") == "llm"

    def lanes(self) -> frozenset[str]:
        return frozenset({JUDGE_LANE}) if self.judge is not None else frozenset()

    def lane(self, sample: Mapping[str, Any]) -> str | None:
        return JUDGE_LANE if self._judged(sample) else None

    def lane_request(self, sample: Mapping[str, Any]) -> ModelRequest:
        if self.judge is None:
            raise ValueError(LLM_NEEDS_JUDGE)
        return self.judge.lane_request(sample)

    def run_lane(self, request: ModelRequest) -> ModelOutcome:
        if self.judge is None:
            raise ValueError(LLM_NEEDS_JUDGE)
        return self.judge.run_lane(request)

    def settle(self, request: ModelRequest, outcome: ModelOutcome) -> ComponentScore:
        if self.judge is None:
            raise ValueError(LLM_NEEDS_JUDGE)
        return self.judge.settle(request, outcome)

    def endpoints(self) -> dict[str, dict[str, Any]]:
        return self.judge.endpoints() if self.judge is not None else {}

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        method = sample.get("accu_reward_method")
        if method is not None and method not in ACCURACY_METHODS:
            raise ValueError(
                f"accu_reward_method: unknown method {method!r}; expected one of {ACCURACY_METHODS}"
            )
        return accuracy_score(
            content,
            sample_solution(sample),
            method,
            guard=self.math_guard,
            timeout_s=self.math_timeout_s,
        )

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        if self._judged(sample):
            return self.judge.work_key(sample)  # type: ignore[union-attr]
        solution = sample.get("solution")
        if not isinstance(solution, str):
            return None
        method = sample.get("accu_reward_method")
        content = completion_text(sample.get("completion"))
        if method not in MAP_METHODS:  # these read more: map the whole text, od_* the answer tag
            content = answer_span(content)
        return work_digest(self.name, repr(method), solution, content)


class Length(Component):
    """Cosine length shaping driven by this sample's accuracy."""

    name = "length"

    def __init__(
        self,
        tokenizer: Any = None,
        math_guard: MathGuard | None = None,
        math_timeout_s: float = DEFAULT_TIMEOUT_S,
        **schedule: Any,
    ) -> None:
        self.tokenizer = load_tokenizer(tokenizer)
        try:
            self.schedule = CosineSchedule(**schedule)
        except TypeError as error:
            raise ValueError(f"length: unknown parameter ({error})") from error
        self.accuracy = Accuracy(math_guard, math_timeout_s)

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        if sample.get("accu_reward_method") == "llm":
            raise ValueError(
                "length: accu_reward_method 'llm' is not supported (the length shaping needs its "
                "accuracy in the same step; a judged accuracy runs in the judge lane); use another "
                "method for these rows, or the accuracy reward with a judge and no length reward"
            )
        accuracy = self.accuracy.compute(content, sample)
        value = cosine_reward(content, self.tokenizer, accuracy.value, schedule=self.schedule)
        return ComponentScore(value, accuracy.status, accuracy.error)
