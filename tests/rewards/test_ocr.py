"""OCR (1 - CER / 1 - WER) and ANLS: the rules, hardening, and the anchors' procedures."""

from __future__ import annotations

import random
import re
import time

import pytest

from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.documents.ocr import (
    MAX_REFERENCE_CHARS,
    anls,
    anls_score,
    check_anls_threshold,
    check_metric,
    gold_answers,
    ocr_score,
    ocr_similarity,
)

# --- ocr: the rules


@pytest.mark.parametrize(
    ("content", "sol", "params", "expected"),
    [
        ("<answer>hello world</answer>", "<answer>hello world</answer>", {}, 1.0),  # exact
        ("<answer>hello wrld</answer>", "hello world", {}, 1 - 1 / 11),  # one deletion of 11
        ("<answer>hello   world</answer>", "hello world", {}, 1.0),  # whitespace collapsed
        # spaces kept: two extra characters
        ("<answer>hello   world</answer>", "hello world", {"collapse_whitespace": False}, 9 / 11),
        ("<answer>Hello World</answer>", "hello world", {}, 1 - 2 / 11),  # case counts by default
        ("<answer>Hello World</answer>", "hello world", {"lowercase": True}, 1.0),
        ("<answer>xyz</answer>", "ab", {}, 0.0),  # CER 1.5: clamped to 0
        ("<answer>" + "a" * 50 + "</answer>", "abc", {}, 0.0),  # far too long: 0 without a distance
        ("<answer>the cat sat</answer>", "the cat sat on", {"metric": "wer"}, 0.75),  # one of 4
        ("<answer>the dog sat on</answer>", "the cat sat on", {"metric": "wer"}, 0.75),
        ("<answer>the  cat\nsat on</answer>", "the cat sat on", {"metric": "wer"}, 1.0),
        ("<answer>The cat</answer>", "the cat", {"metric": "wer"}, 0.5),  # words are case-sensitive
        ("<answer>a b c d e f g h</answer>", "x y", {"metric": "wer"}, 0.0),  # WER past 1
        # no answer tag: the whole text is read (CER 16/11)
        ("<think>hello world</think>hello", "hello world", {}, 0.0),
        ("<answer>a</answer><answer>hello world</answer>", "hello world", {}, 1.0),  # last tag
    ],
)
def test_ocr_similarity(content: str, sol: str, params: dict, expected: float) -> None:
    assert ocr_similarity(content, sol, **params) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ("<answer>hello</answer>", Status.OK),
        ("<answer>zzzzzzzzzzzzzzzzzzzzzz</answer>", Status.OK),  # read, and wrong
        ("<answer>   </answer>", Status.UNPARSEABLE),  # empty answer
        (None, Status.UNPARSEABLE),
        (42, Status.UNPARSEABLE),
    ],
)
def test_ocr_status(content: object, status: Status) -> None:
    assert ocr_score(content, "hello world").status is status  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "sol",
    [
        "<answer>   </answer>",  # empty ground truth
        "",
        None,
        ["hello"],  # ocr compares against one text
        "x" * (MAX_REFERENCE_CHARS + 1),  # past the cap
    ],
)
def test_ocr_malformed_ground_truth_names_solution(sol: object) -> None:
    with pytest.raises(ValueError, match="^solution: "):
        ocr_similarity("<answer>hello</answer>", sol)  # type: ignore[arg-type]


@pytest.mark.parametrize("metric", ["CER", "bleu", None, 1])
def test_unknown_metric_is_named(metric: object) -> None:
    with pytest.raises(ValueError, match="^metric: "):
        check_metric(metric)


# --- anls: the rules


@pytest.mark.parametrize(
    ("content", "sol", "expected"),
    [
        ("<answer>Denver Broncos</answer>", "Denver Broncos", 1.0),  # exact
        ("<answer>  denver   BRONCOS </answer>", "Denver Broncos", 1.0),  # case and spaces
        ("<answer>12/15/89</answer>", "12/15/88", 1 - 1 / 8),  # one character of 8
        ("<answer>Dear dr. Lobo</answer>", '["Dear Dr. Lobo", "Dr. Lobo"]', 1.0),  # the best
        ("<answer>Dr Lobo</answer>", '["Dear Dr. Lobo", "Dr. Lobo"]', 1 - 1 / 8),
        ("<answer>abcd</answer>", "abxy", 0.0),  # NL = 0.5: not below the threshold
        ("<answer>abcde</answer>", "abxye", 1 - 2 / 5),  # NL = 0.4
        ("<answer>cat</answer>", "elephant", 0.0),  # far
        ("<answer>4 pm</answer>", ["4 PM", "16:00"], 1.0),  # a list column
        ("<answer>[1]</answer>", '["[1]"]', 1.0),  # an answer starting with "[" is listed
        ("<answer>x</answer><answer>paris</answer>", "Paris", 1.0),  # last answer tag
    ],
)
def test_anls(content: str, sol: object, expected: float) -> None:
    assert anls(content, sol) == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize(
    ("threshold", "expected"),
    [
        (0.5, 0.0),  # NL = 0.5 is not below 0.5
        (0.51, 0.5),
        (1.0, 0.5),
        (0.25, 0.0),
    ],
)
def test_anls_threshold(threshold: float, expected: float) -> None:
    assert anls("<answer>abcd</answer>", "abxy", threshold=threshold) == expected


@pytest.mark.parametrize("threshold", [0, -0.5, 1.5, float("nan"), float("inf"), True, "0.5", None])
def test_bad_anls_threshold_is_named(threshold: object) -> None:
    with pytest.raises(ValueError, match="^threshold: "):
        check_anls_threshold(threshold)


@pytest.mark.parametrize(
    "sol",
    [
        '["a", "b"',  # malformed JSON
        "[]",  # no gold answer
        '["a", 3]',  # not all strings
        '[["a"]]',
        "[" * 100_000,  # deep nesting
        '["a", "  "]',  # an empty answer
        [],
        ["a", None],
        None,
        7,
        "<answer></answer>",
    ],
)
def test_anls_malformed_gold_names_solution(sol: object) -> None:
    with pytest.raises(ValueError, match="^solution: "):
        anls("<answer>a</answer>", sol)


@pytest.mark.parametrize(
    ("sol", "expected"),
    [
        ("<answer> Paris </answer>", ["paris"]),  # one answer
        ('["4  PM", "16:00"]', ["4 pm", "16:00"]),  # a JSON list, normalised
        ('{"a": 1}', ['{"a": 1}']),  # only "[" opens a list: this is one answer
        ('["[1]"]', ["[1]"]),  # an answer that starts with "[" is written in a list
        (("A", "b"), ["a", "b"]),  # a list column
    ],
)
def test_gold_answers(sol: object, expected: list[str]) -> None:
    assert gold_answers(sol) == expected


@pytest.mark.parametrize(
    ("content", "status"),
    [
        ("<answer>paris</answer>", Status.OK),
        ("<answer>london</answer>", Status.OK),
        ("<answer></answer>", Status.UNPARSEABLE),
        (None, Status.UNPARSEABLE),
        (["paris"], Status.UNPARSEABLE),  # not text (completion_text reads message lists)
    ],
)
def test_anls_status(content: object, status: Status) -> None:
    assert anls_score(content, "Paris").status is status  # type: ignore[arg-type]


# --- hardening: model text never raises and stays cheap


HOSTILE = [
    None,
    b"<answer>hello</answer>",
    {"content": "hello"},
    "<answer>" * 10_000 + "hello world" + "</answer>" * 10_000,  # nested tags
    "a" * 2_000_000,  # past every cap
    "ab " * 300_000,  # many words
    "\x00\ud800 hello \u0130",  # a NUL, a lone surrogate, a letter whose lower case is longer
    "<answer>" + "ab" * 9_000 + "</answer>",  # nearly the reference's length: a real distance
]


@pytest.mark.parametrize("content", HOSTILE)
@pytest.mark.parametrize("metric", ["cer", "wer", "anls"])
def test_model_text_never_raises_and_is_cheap(content: object, metric: str) -> None:
    reference = "ba" * (MAX_REFERENCE_CHARS // 2)  # the largest ground truth allowed
    start = time.process_time()
    if metric == "anls":
        score = anls_score(content, reference)  # type: ignore[arg-type]
    else:
        words = " ".join(["baba"] * (MAX_REFERENCE_CHARS // 5))  # 4,000 words
        score = ocr_score(content, reference if metric == "cer" else words, metric=metric)  # type: ignore[arg-type]
    assert 0.0 <= score.value <= 1.0
    assert score.status in (Status.OK, Status.UNPARSEABLE)
    assert time.process_time() - start < 1.0


# --- the anchors, transcribed step by step (their code is not in the package)

# ROLL, roll/pipeline/rlvr/rewards/video_r1_reward_worker.py accuracy_reward, question_type
# "OCR" (alibaba/ROLL 8eb27cc, after Video-R1): the first <answer> span (DOTALL) of each side,
# else the whole text; word error rate by a word-level DP over str.split(), divided by
# max(1, reference words); reward 1 - WER clamped to [0, 1]. Case-sensitive.


def roll_extract_answer(text: str) -> str:
    match = re.search(r"<answer>\s*(.*?)\s*</answer>", text, re.DOTALL)
    if match:
        return match.group(1).strip()
    return text


def roll_wer(reference: str, hypothesis: str) -> float:
    ref_words = reference.split()
    hyp_words = hypothesis.split()
    m, n = len(ref_words), len(hyp_words)
    d = [[0] * (n + 1) for _ in range(m + 1)]
    for i in range(m + 1):
        d[i][0] = i
    for j in range(n + 1):
        d[0][j] = j
    for i in range(1, m + 1):
        for j in range(1, n + 1):
            if ref_words[i - 1] == hyp_words[j - 1]:
                d[i][j] = d[i - 1][j - 1]
            else:
                d[i][j] = 1 + min(d[i - 1][j], d[i][j - 1], d[i - 1][j - 1])
    return d[m][n] / max(1, m)


def roll_ocr_reward(completion: str, solution: str) -> float:
    output_ans = roll_extract_answer(completion)
    gt_ans = roll_extract_answer(solution)
    reward = 1 - roll_wer(gt_ans, output_ans)
    return max(0.0, min(1.0, reward))


# CER has no anchor among the RL frameworks: the textbook definition (character edit
# distance over reference length, as jiwer's cer), by an independent character DP here.


def textbook_cer(reference: str, hypothesis: str) -> float:
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i]
        for j, h in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h)))
        previous = current
    return previous[-1] / len(reference)


# ANLS, the reference script (shunk031/ANLS anls/metrics/score.py, "based on the one provided
# by the Robust Reading Competition"): both sides stripped, lower-cased, whitespace runs
# joined by one space; NL = lev / max(len) of those; 1 - NL if NL < threshold else 0; max
# over the gold answers.


def rrc_levenshtein(s1: str, s2: str) -> int:
    if len(s1) > len(s2):
        s1, s2 = s2, s1
    distances = range(len(s1) + 1)
    for i2, c2 in enumerate(s2):
        distances_ = [i2 + 1]
        for i1, c1 in enumerate(s1):
            if c1 == c2:
                distances_.append(distances[i1])
            else:
                distances_.append(1 + min((distances[i1], distances[i1 + 1], distances_[-1])))
        distances = distances_
    return distances[-1]


def rrc_anls_score(prediction: str, gold_labels: list[str], threshold: float = 0.5) -> float:
    y_pred = " ".join(prediction.strip().lower().split())
    scores = []
    for gold_label in gold_labels:
        y_true = " ".join(gold_label.strip().lower().split())
        nl_score = rrc_levenshtein(y_pred, y_true) / max(len(y_pred), len(y_true))
        scores.append(1 - nl_score if nl_score < threshold else 0.0)
    return max(scores)


# ANLS, lmms-eval (lmms_eval/api/metrics.py anls, EvolvingLMMs-Lab/lmms-eval 75571cf, after
# Qwen-VL's infographicsvqa_eval.py): the distance on normalised strings, but the length
# max(len(raw gold.upper()), len(raw prediction.upper())) of the raw texts; 1 - min(NL),
# zeroed when below the threshold (so NL = 0.5 scores 0.5 there).


def lmms_eval_anls(references: list[str], predictions: list[str], thresh_hold: float = 0.5):
    values = []
    pred = predictions[0]
    for answer in references:
        gt_answer = " ".join(answer.strip().lower().split())
        det_answer = " ".join(pred.strip().lower().split())
        dist = rrc_levenshtein(gt_answer, det_answer)
        length = max(len(answer.upper()), len(pred.upper()))
        values.append(0.0 if length == 0 else float(dist) / float(length))
    question_result = 1 - min(values)
    if question_result < thresh_hold:
        question_result = 0
    return {"anls": question_result}


# --- generated cases

_WORDS = "the invoice total date amount 4 pm Dr. Lobo 12/15/88 $1,093.34 cat Paris ave".split()


def _mutate(rng: random.Random, text: str) -> str:
    """Character edits a reader makes: substitutions, drops, doubles, case, spaces."""
    out = []
    for char in text:
        roll = rng.random()
        if roll < 0.06:
            continue
        if roll < 0.12:
            out.append(rng.choice("abcdeo01 "))
        elif roll < 0.16:
            out.append(char + char)
        elif roll < 0.2:
            out.append(char.swapcase())
        else:
            out.append(char)
    return "".join(out)


def _text(rng: random.Random, low: int, high: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(low, high)))


def ocr_case(rng: random.Random) -> tuple[str, str]:
    truth = _text(rng, 1, 20)
    kind = rng.random()
    if kind < 0.15:
        answer = truth
    elif kind < 0.7:
        answer = _mutate(rng, truth)
    elif kind < 0.8:
        answer = _text(rng, 0, 30)  # unrelated, maybe empty, maybe much longer
    elif kind < 0.9:
        answer = truth + " " + _text(rng, 1, 25)  # run-on
    else:
        answer = "  ".join(truth.split())  # the same words, spaced out
    completion = rng.choice(
        [
            f"<think>reading the image</think><answer>{answer}</answer>",
            f"<answer>\n{answer}\n</answer>",
            answer,  # no tag: both read the whole text
        ]
    )
    return completion, f"<answer>{truth}</answer>"


def test_differential_roll_wer() -> None:
    """Equal to ROLL's OCR reward on every generated case (one answer tag per completion)."""
    rng = random.Random("roll-wer")
    partial = 0
    for _ in range(400):
        completion, solution = ocr_case(rng)
        expected = roll_ocr_reward(completion, solution)
        got = ocr_similarity(completion, solution, metric="wer")
        assert got == expected, (completion, solution)
        partial += 0.0 < got < 1.0
    assert partial > 100


def test_roll_reads_the_first_answer_tag_we_read_the_last() -> None:
    """The one deliberate difference from ROLL (SPEC: the last answer tag is the answer)."""
    completion = "<answer>draft text</answer> <answer>the cat sat</answer>"
    assert roll_ocr_reward(completion, "the cat sat") == 0.0
    assert ocr_similarity(completion, "the cat sat", metric="wer") == 1.0


def test_differential_textbook_cer() -> None:
    rng = random.Random("cer")
    for _ in range(400):
        completion, solution = ocr_case(rng)
        student, truth = roll_extract_answer(completion).strip(), roll_extract_answer(solution)
        expected = max(0.0, 1 - textbook_cer(truth, student)) if student else 0.0
        got = ocr_similarity(completion, solution, collapse_whitespace=False)
        assert got == expected, (completion, solution)


def anls_case(rng: random.Random) -> tuple[str, list[str]]:
    golds = [_text(rng, 1, 4) for _ in range(rng.randint(1, 3))]
    base = rng.choice(golds)
    kind = rng.random()
    if kind < 0.2:
        answer = base
    elif kind < 0.75:
        answer = _mutate(rng, base)
    elif kind < 0.9:
        answer = _text(rng, 1, 6)
    else:
        answer = f"  {base.upper()}\t "  # case and spaces only
    return answer, golds


def test_differential_rrc_anls() -> None:
    """Equal to the reference ANLS script on every generated case, gold as a JSON list or a list."""
    import json

    rng = random.Random("anls")
    partial = 0
    for _ in range(500):
        answer, golds = anls_case(rng)
        if not " ".join(answer.split()):
            continue  # the script divides by zero on two empty strings; we score 0.0
        expected = rrc_anls_score(answer, golds)
        for sol in (f"<answer>{json.dumps(golds)}</answer>", golds):
            assert anls(f"<think>x</think><answer>{answer}</answer>", sol) == expected
        partial += 0.0 < expected < 1.0
    assert partial > 80


def test_differential_lmms_eval_anls() -> None:
    """Equal to lmms-eval's ANLS except where its two quirks apply, each checked here.

    - it divides by the raw lengths (before whitespace is collapsed and the ends
      stripped), so an answer with extra spaces gets a smaller NL there;
    - its threshold keeps ``1 - NL >= 0.5``: NL exactly 0.5 scores 0.5 there, 0 here
      (and in the reference script).
    """
    rng = random.Random("lmms-anls")
    differences = 0
    for _ in range(500):
        answer, golds = anls_case(rng)
        if not " ".join(answer.split()):
            continue
        expected = lmms_eval_anls(golds, [answer])["anls"]
        got = anls(f"<answer>{answer}</answer>", golds)
        if got == expected:
            continue
        differences += 1
        raw_differs = any(" ".join(t.split()) != t for t in (answer, *golds))
        half = any(
            rrc_levenshtein(" ".join(answer.lower().split()), " ".join(g.lower().split())) * 2
            == max(len(" ".join(answer.split())), len(" ".join(g.split())))
            for g in golds
        )
        assert raw_differs or half, (answer, golds, got, expected)
    assert differences > 0
