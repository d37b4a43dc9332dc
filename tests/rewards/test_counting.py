"""Counting reward: the last number of the answer span against the count, and four anchors."""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass
from fractions import Fraction

import pytest
from math_verify import parse, verify

from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.contract.text import MAX_ANSWER_CHARS
from skyrl_rewards.rewards.documents.counting import (
    MAX_NUMBER_CHARS,
    check_tolerance,
    count_reward,
    count_score,
    ground_truth_count,
    stated_number,
)

# --- reading the stated number


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>7</answer>", 7),  # bare digits
        ("<answer>There are 7 objects.</answer>", 7),  # in a sentence; the full stop is no decimal
        ("<answer>3,000</answer>", 3000),  # thousands separator
        ("<answer>1,2,3</answer>", 3),  # a list, not thousands groups: the last is 3
        ("<answer>1,2345</answer>", 2345),  # not a thousands group either
        ("<answer>2.5</answer>", Fraction(5, 2)),  # decimals are exact
        ("<answer>-3</answer>", -3),  # a sign where it cannot be a hyphen
        ("<answer>3-4</answer>", 4),  # a range: hyphen, not minus
        ("<answer>\\boxed{5}</answer>", 5),  # LaTeX around it
        ("<answer>[6]</answer>", 6),  # AReaL's bracket format
        ("<answer>seven</answer>", 7),  # number words
        ("<answer>Twenty-One</answer>", 21),  # compound, any case
        ("<answer>twenty one</answer>", 21),  # compound with a space
        ("<answer>one hundred and five</answer>", 105),  # "and" inside a number
        ("<answer>a hundred</answer>", 100),  # a bare scale word
        ("<answer>ten thousand five hundred</answer>", 10_500),
        ("<answer>one million two hundred thousand</answer>", 1_200_000),
        ("<answer>3 thousand</answer>", 3000),  # digits with a scale word
        ("<answer>zero</answer>", 0),
        ("<answer>one two three</answer>", 3),  # three numbers, not 6
        ("<answer>twenty, one</answer>", 1),  # punctuation ends a number
        ("<answer>nineteen ninety</answer>", 90),  # not a year reading
        ("<answer>2 red and 3 blue: five in total</answer>", 5),  # several: the last
        ("<think>I see 4</think><answer>3</answer>", 3),  # the think part is not read
        ("<answer>4</answer> then <answer>5</answer>", 5),  # the last answer tag
        ("no tags, just 8 things", 8),  # no answer tag: the whole text
        ("<answer>someone, none, tone</answer>", None),  # words containing "one" are not numbers
        ("<answer>I cannot tell</answer>", None),  # no number
        ("<answer></answer>", None),  # empty answer
    ],
)
def test_stated_number(text: str, expected: int | Fraction | None) -> None:
    assert stated_number(text) == expected


@pytest.mark.parametrize(
    ("content", "sol", "params", "expected"),
    [
        ("<answer>3</answer>", "<answer>3</answer>", {}, 1.0),  # exact
        ("<answer>three</answer>", "3", {}, 1.0),  # words; a plain solution string
        ("<answer>3.0</answer>", "3", {}, 1.0),  # a decimal equal to the count
        ("<answer>4</answer>", "3", {}, 0.0),  # wrong
        ("<answer>2.6</answer>", "3", {"tolerance": 0.4}, 1.0),  # within the absolute bound
        ("<answer>3.1</answer>", "3", {"tolerance": 0.1}, 1.0),  # exact decimal arithmetic
        ("<answer>5</answer>", "3", {"tolerance": 1}, 0.0),  # past the absolute bound
        ("<answer>33</answer>", "30", {"relative_tolerance": 0.1}, 1.0),  # 10 % of 30
        ("<answer>34</answer>", "30", {"relative_tolerance": 0.1}, 0.0),
        ("<answer>1</answer>", "0", {"relative_tolerance": 0.5}, 0.0),  # relative to 0 is 0
        ("<answer>1</answer>", "0", {"tolerance": 1, "relative_tolerance": 0.5}, 1.0),  # either
        ("<answer>1,200</answer>", "<answer>1,200</answer>", {}, 1.0),  # separators both sides
        ("<answer>-3</answer>", "3", {}, 0.0),  # a negative count is wrong
        ("<answer>I cannot tell</answer>", "3", {}, 0.0),  # nothing readable
        (7, "3", {}, 0.0),  # not text
    ],
)
def test_count_reward(content: object, sol: object, params: dict, expected: float) -> None:
    assert count_reward(content, sol, **params) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ("<answer>3</answer>", Status.OK),
        ("<answer>4</answer>", Status.OK),  # wrong, but read
        ("<answer>" + "9" * (MAX_NUMBER_CHARS + 1) + "</answer>", Status.OK),  # read, never equal
        ("<answer>many</answer>", Status.UNPARSEABLE),
        ("", Status.UNPARSEABLE),
        (None, Status.UNPARSEABLE),
    ],
)
def test_count_status(content: object, status: Status) -> None:
    assert count_score(content, "3").status is status  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("sol", "expected"),
    [
        ("<answer> 12 </answer>", 12),
        ("1,200", 1200),
        (5, 5),  # an int column
        (0, 0),
    ],
)
def test_ground_truth_count(sol: object, expected: int) -> None:
    assert ground_truth_count(sol) == expected


@pytest.mark.parametrize(
    "sol",
    [
        "<answer>three</answer>",  # words are for the model; a dataset writes digits
        "<answer>2.5</answer>",  # not an integer
        "<answer>-1</answer>",  # negative
        -1,
        "<answer></answer>",  # empty
        "1" * (MAX_NUMBER_CHARS + 1),  # absurd
        None,
        True,  # a bool is no count
        3.0,  # a float column: write the count as an integer
        ["3"],
    ],
)
def test_malformed_ground_truth_names_solution(sol: object) -> None:
    with pytest.raises(ValueError, match="^solution: "):
        count_reward("<answer>3</answer>", sol)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        (0, True),
        (0.5, True),
        (2, True),
        (-0.1, False),  # negative
        (math.inf, False),
        (math.nan, False),
        (True, False),  # a bool is a config mistake
        ("1", False),
        (None, False),
    ],
)
def test_check_tolerance(value: object, ok: bool) -> None:
    if ok:
        assert check_tolerance("tolerance", value) == value
    else:
        with pytest.raises(ValueError, match="^tolerance: "):
            check_tolerance("tolerance", value)


# --- hardening: model text never raises and stays cheap


@pytest.mark.parametrize(
    "content",
    [
        None,
        b"<answer>3</answer>",  # bytes are not decoded here (completion_text does that)
        ["<answer>3</answer>"],
        {"content": "3"},
        "<answer>" * 10_000 + "3" + "</answer>" * 10_000,  # nested tags: the innermost span
        "<answer><answer>3</answer></answer>",
        "9" * 5_000_000,  # one huge number
        "1," * 1_000_000,  # a million list items
        "one " * 500_000,  # half a million number words
        "twenty-" * 300_000,  # hyphen chains
        "-" * 1_000_000 + "3",
        "\x00\ud800 3 \u0663",  # a NUL, a lone surrogate, an Arabic-Indic digit (not read)
    ],
)
def test_model_text_never_raises_and_is_cheap(content: object) -> None:
    start = time.process_time()
    score = count_score(content, "3")  # type: ignore[arg-type]
    assert 0.0 <= score.value <= 1.0
    assert score.status in (Status.OK, Status.UNPARSEABLE)
    assert time.process_time() - start < 2.0


def test_nested_tags_read_the_innermost_span() -> None:
    assert count_reward("<answer>" * 100 + "3" + "</answer>" * 100, "3") == 1.0


def test_answer_span_past_the_cap_reads_its_head() -> None:
    head = "<answer>3 " + "x" * MAX_ANSWER_CHARS + " 4</answer>"
    assert stated_number(head) == 3  # the span is cut before the 4


# --- the anchors, transcribed step by step (their code is not in the package)

# AReaL, areal/reward/clevr_count_70k.py (inclusionAI/AReaL 4aef98d): the last "[digits.]" of
# the whole completion, compared as a string with the dataset's answer. The prompt asks for
# "the final answer in [ ] format".


def areal_clevr_count_70k_reward(completions: str, answer: str) -> float:
    match = re.findall(r"\[([0-9\.]+)\]", completions)
    sol = match[-1] if match else ""
    return float(sol.strip() == answer.strip())


# R1-V evaluation, src/eval/test_qwen2vl_counting_superclevr.py (Deep-Agent/R1-V bbbbe3d):
# the first "<answer> digits </answer>" as an int, equal to the int ground truth.


def r1v_eval_counting(output_str: str, ground_truth: int) -> float:
    match = re.search(r"<answer>\s*(\d+)\s*</answer>", output_str)
    model_answer = int(match.group(1)) if match else None
    return float(model_answer is not None and model_answer == ground_truth)


# R1-V training, src/r1-v/src/open_r1/grpo.py accuracy_reward (CLEVR counting's reward):
# math-verify on the whole completion (its argument order), else string equality of the
# first <answer> span of each (non-DOTALL). Solutions are "<answer> 3 </answer>".


def r1v_accuracy_reward(content: str, sol: str) -> tuple[float, str]:
    try:
        if float(verify(parse(content), parse(sol))) > 0:
            return 1.0, "math-verify"
    except Exception:  # the reference's bare except  # noqa: BLE001
        pass
    sol_match = re.search(r"<answer>(.*?)</answer>", sol)
    ground_truth = sol_match.group(1).strip() if sol_match else sol.strip()
    content_match = re.search(r"<answer>(.*?)</answer>", content)
    student_answer = content_match.group(1).strip() if content_match else content.strip()
    return float(student_answer == ground_truth), "string"


# NeMo-Gym, resources_servers/circle_count/app.py (NVIDIA-NeMo/Gym 07d6b0d): the first
# "\boxed{digits}" of the output as an int, equal to the expected count.


def nemo_gym_circle_count(output_text: str, expected_count: int) -> float:
    match = re.search(r"\\boxed\{(\d+)\}", output_text)
    predicted_count = int(match.group(1)) if match else None
    return float(predicted_count is not None and predicted_count == expected_count)


# --- generated completions

_SMALL = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen".split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()


def words(n: int) -> str:
    """English words for 0..999, as a model writes them."""
    if n < 20:
        return _SMALL[n]
    if n < 100:
        return _TENS[n // 10 - 2] + ("" if n % 10 == 0 else "-" + _SMALL[n % 10])
    rest = n % 100
    return f"{_SMALL[n // 100]} hundred" + ("" if rest == 0 else " and " + words(rest))


@dataclass(frozen=True)
class Case:
    completion: str
    truth: int
    form: str  # how the stated number is written: digits, word, thousands, decimal
    wrapper: str  # what the answer span holds around it
    envelope: str  # where the answer span sits in the completion

    @property
    def features(self) -> frozenset[str]:
        return frozenset({self.form, self.wrapper, self.envelope})


FORMS = ("digits", "word", "thousands", "decimal")
WRAPPERS = ("bare", "sentence", "boxed", "bracket", "several", "trailing", "none", "junk")
ENVELOPES = (
    "tags",
    "spaced",
    "answer_only",
    "untagged",
    "think_number",
    "two_answers",
    "boxed_think",
)


def generate(rng: random.Random) -> Case:
    form = rng.choice(FORMS)
    truth = rng.randint(1000, 20_000) if form == "thousands" else rng.randint(0, 30)
    stated = truth if rng.random() < 0.6 else max(0, truth + rng.choice([-3, -1, 1, 2, 10]))
    if form == "digits":
        number = str(stated)
    elif form == "word":
        number = words(stated)
    elif form == "thousands":
        number = f"{stated:,}"
    else:
        number = f"{stated}.0" if rng.random() < 0.5 else f"{stated}.5"
    other, other2 = rng.randint(0, 30), rng.randint(0, 30)
    wrapper = rng.choice(WRAPPERS)
    span = {
        "bare": number,
        "sentence": f"There are {number} objects.",
        "boxed": f"\\boxed{{{number}}}",
        "bracket": f"[{number}]",
        "several": f"{other} red and {number} in total",
        "trailing": f"{number}, though I first counted {other}",
        "none": rng.choice(["I cannot tell.", "none", "many", "several objects", ""]),
        "junk": "".join(rng.choice("xyzq!?#@ <>/") for _ in range(rng.randint(0, 40))),
    }[wrapper]
    envelope = rng.choice(ENVELOPES)
    completion = {
        "tags": f"<think>Counting the objects.</think><answer>{span}</answer>",
        "spaced": f"<think>Counting.</think>\n<answer> {span} </answer>",
        "answer_only": f"<answer>{span}</answer>",
        "untagged": span,
        "think_number": f"<think>I first see {other2} objects.</think><answer>{span}</answer>",
        "two_answers": f"<answer>{other2}</answer> wait. <answer>{span}</answer>",
        "boxed_think": f"<think>maybe \\boxed{{{other2}}}</think><answer>{span}</answer>",
    }[envelope]
    return Case(completion, truth, form, wrapper, envelope)


CASES = [generate(random.Random(f"count-{i}")) for i in range(600)]

# Every difference between our reward and an anchor's, with the case feature that causes it.
# All are deliberate: we read the last number of the last answer span, in any of the
# forms above; each anchor reads one format only.

AREAL_DIFFERENCES = {
    # AReaL reads only "[n]"; a count stated any other way scores 0.0 there
    "bare": "no brackets",
    "sentence": "no brackets",
    "boxed": "no brackets",
    "several": "no brackets",
    "trailing": "no brackets; we read the later number",
    "word": "number words (AReaL: digits only)",
    "thousands": "thousands separators (AReaL: [0-9.] only)",
    "decimal": "3.0 equals 3 (AReaL compares strings)",
}
R1V_EVAL_DIFFERENCES = {
    # R1-V's evaluation reads an answer span of bare ASCII digits only, the first one
    "sentence": "a sentence around the number",
    "boxed": "\\boxed{} around the number",
    "bracket": "[] around the number",
    "several": "several numbers: we read the last",
    "trailing": "several numbers: we read the last",
    "word": "number words",
    "thousands": "thousands separators",
    "decimal": "decimals",
    "untagged": "no answer tag: we read the whole text",
    "two_answers": "the last answer tag, not the first",
}
NEMO_DIFFERENCES = {
    # NeMo-Gym reads the first "\boxed{digits}" anywhere (its prompt asks for \boxed{})
    "bare": "no \\boxed{}",
    "sentence": "no \\boxed{}",
    "bracket": "no \\boxed{}",
    "several": "no \\boxed{}",
    "trailing": "no \\boxed{}",
    "word": "number words",
    "thousands": "thousands separators",
    "decimal": "decimals",
    "boxed_think": "a \\boxed{} in the think part: NeMo-Gym reads the first, we the answer span",
}


def _check(anchor_name: str, differences: dict[str, str], anchor, expected_agree: int) -> None:
    disagreements = []
    seen: set[str] = set()
    for case in CASES:
        ours, theirs = count_reward(case.completion, str(case.truth)), anchor(case)
        if ours == theirs:
            continue
        reasons = case.features & differences.keys()
        assert reasons, (anchor_name, case, ours, theirs)  # an unlisted difference
        disagreements.append(case)
        seen |= reasons
    assert len(CASES) - len(disagreements) >= expected_agree, (anchor_name, len(disagreements))
    # every listed difference occurs: the list describes the anchor, not a wish
    assert seen == differences.keys(), (anchor_name, differences.keys() - seen)


def test_differential_areal() -> None:
    _check(
        "AReaL",
        AREAL_DIFFERENCES,
        lambda case: areal_clevr_count_70k_reward(case.completion, str(case.truth)),
        expected_agree=400,
    )


def test_differential_r1v_eval() -> None:
    _check(
        "R1-V eval",
        R1V_EVAL_DIFFERENCES,
        lambda case: r1v_eval_counting(case.completion, case.truth),
        expected_agree=350,
    )


def test_differential_nemo_gym() -> None:
    _check(
        "NeMo-Gym",
        NEMO_DIFFERENCES,
        lambda case: nemo_gym_circle_count(case.completion, case.truth),
        expected_agree=400,
    )


@pytest.mark.parametrize(
    ("answer_format", "anchor"),
    [
        ("[{}]", lambda text, truth: areal_clevr_count_70k_reward(text, str(truth))),
        ("{}", r1v_eval_counting),
        ("\\boxed{{{}}}", nemo_gym_circle_count),
    ],
)
def test_equal_in_each_anchors_own_format(answer_format: str, anchor) -> None:
    """Digits in the format each anchor's prompt asks for: every value is equal."""
    rng = random.Random(answer_format)
    for _ in range(300):
        truth, stated = rng.randint(0, 50), rng.randint(0, 50)
        stated = truth if rng.random() < 0.5 else stated
        think = rng.choice(["", "<think>Counting the objects.</think>", "<think>\n</think>\n"])
        completion = f"{think}<answer>{answer_format.format(stated)}</answer>"
        assert count_reward(completion, str(truth)) == anchor(completion, truth), completion


def test_differential_r1v_training_reward() -> None:
    """R1-V's training reward: each difference is one of its two branches reading otherwise.

    - math-verify (on the whole completion) pays 1.0 where we pay 0.0: it picked a
      number outside the answer span or another number inside it (e.g. ``2 red and 3``'s
      3 when 3 is right, but we read the trailing number), or the think part's number;
      or its string branch reads the first answer tag (we read the last).
    - we pay 1.0 where R1-V pays 0.0: the answer span is not exactly the ground truth's
      string (words, separators, a sentence, decimals) and math-verify's extraction
      missed it (it returns nothing for ``<answer>3.0</answer>`` or ``[3]``).
    """
    ours_only = theirs_only = agree = 0
    for case in CASES:
        ours = count_reward(case.completion, str(case.truth))
        theirs, branch = r1v_accuracy_reward(case.completion, f"<answer> {case.truth} </answer>")
        if ours == theirs:
            agree += 1
        elif theirs == 1.0:
            # the string branch pays more only by reading the first answer tag
            assert branch == "math-verify" or case.envelope == "two_answers", case
            assert stated_number(case.completion) != case.truth, case
            theirs_only += 1
        else:
            span = re.search(r"<answer>(.*?)</answer>", case.completion)
            text = span.group(1).strip() if span else case.completion.strip()
            assert text != str(case.truth), case
            ours_only += 1
    assert agree >= 300 and ours_only > 0 and theirs_only > 0, (agree, ours_only, theirs_only)
