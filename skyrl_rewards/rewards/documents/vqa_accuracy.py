"""VQAv2's accuracy: ``min(#annotators who gave the answer / 3, 1)``, averaged over leave-one-out subsets.

The rules are the VQA evaluation as lmms-eval runs it for VQAv2
(``tasks/vqav2/utils.py``): the official script's accuracy
(GT-Vision-Lab/VQA ``vqaEval.py``) on a prediction first normalised by
EvalAI's answer processor (``EvalAIAnswerProcessor``, after mmf), as the
EvalAI leaderboard normalises submissions:

1. the prediction (the completion's answer span) is lower-cased, ``,`` and
   ``?`` dropped, ``'s`` split off (`` 's``), newlines and tabs made spaces,
   stripped, then punctuation-processed and digit/article-processed
   (:func:`process_punctuation`, :func:`process_digit_article`);
2. each gold answer has newlines and tabs made spaces and is stripped; when
   the gold answers are not all the same text, each gold answer and the
   prediction are punctuation- and digit/article-processed (again, for the
   prediction);
3. for each gold answer, the others (all but that one) that equal the
   prediction are counted: ``min(1, count / 3)``; the reward is the mean over
   the gold answers (VQAv2 has 10: the 10 leave-one-out subsets of 9).

Gold answers: the solution's answer span as a JSON list of strings, or a
list column. Fewer than :data:`MIN_GOLD_ANSWERS` is a dataset error (a right
answer could not reach 1.0). An empty answer scores 0.0 with status
``unparseable``. docs/rewards.md lists where the official script differs.
"""

from __future__ import annotations

import re
import statistics
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

MIN_GOLD_ANSWERS = 4
"""Fewest gold answers: with n of them a unanimous right answer scores min(1, (n - 1) / 3)."""

MAX_GOLD_ANSWERS = 1_000
"""Most gold answers a row may carry (VQAv2 has 10); more is a dataset error."""

CONTRACTIONS = {
    "aint": "ain't",
    "arent": "aren't",
    "cant": "can't",
    "couldve": "could've",
    "couldnt": "couldn't",
    "couldn'tve": "couldn't've",
    "couldnt've": "couldn't've",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hadnt've": "hadn't've",
    "hadn'tve": "hadn't've",
    "hasnt": "hasn't",
    "havent": "haven't",
    "hed": "he'd",
    "hed've": "he'd've",
    "he'dve": "he'd've",
    "hes": "he's",
    "howd": "how'd",
    "howll": "how'll",
    "hows": "how's",
    "isnt": "isn't",
    "itd": "it'd",
    "itd've": "it'd've",
    "it'dve": "it'd've",
    "itll": "it'll",
    "maam": "ma'am",
    "mightnt": "mightn't",
    "mightnt've": "mightn't've",
    "mightn'tve": "mightn't've",
    "mightve": "might've",
    "mustnt": "mustn't",
    "mustve": "must've",
    "neednt": "needn't",
    "notve": "not've",
    "oclock": "o'clock",
    "oughtnt": "oughtn't",
    "ow's'at": "'ow's'at",
    "'ows'at": "'ow's'at",
    "'ow'sat": "'ow's'at",
    "shant": "shan't",
    "shed've": "she'd've",
    "she'dve": "she'd've",
    "shouldve": "should've",
    "shouldnt": "shouldn't",
    "shouldnt've": "shouldn't've",
    "shouldn'tve": "shouldn't've",
    "somebody'd": "somebodyd",
    "somebodyd've": "somebody'd've",
    "somebody'dve": "somebody'd've",
    "somebodyll": "somebody'll",
    "somebodys": "somebody's",
    "someoned": "someone'd",
    "someoned've": "someone'd've",
    "someone'dve": "someone'd've",
    "someonell": "someone'll",
    "someones": "someone's",
    "somethingd": "something'd",
    "somethingd've": "something'd've",
    "something'dve": "something'd've",
    "somethingll": "something'll",
    "thats": "that's",
    "thered": "there'd",
    "thered've": "there'd've",
    "there'dve": "there'd've",
    "therere": "there're",
    "theres": "there's",
    "theyd": "they'd",
    "theyd've": "they'd've",
    "they'dve": "they'd've",
    "theyll": "they'll",
    "theyre": "they're",
    "theyve": "they've",
    "twas": "'twas",
    "wasnt": "wasn't",
    "wed've": "we'd've",
    "we'dve": "we'd've",
    "weve": "we've",
    "werent": "weren't",
    "whatll": "what'll",
    "whatre": "what're",
    "whats": "what's",
    "whatve": "what've",
    "whens": "when's",
    "whered": "where'd",
    "wheres": "where's",
    "whereve": "where've",
    "whod": "who'd",
    "whod've": "who'd've",
    "who'dve": "who'd've",
    "wholl": "who'll",
    "whos": "who's",
    "whove": "who've",
    "whyll": "why'll",
    "whyre": "why're",
    "whys": "why's",
    "wont": "won't",
    "wouldve": "would've",
    "wouldnt": "wouldn't",
    "wouldnt've": "wouldn't've",
    "wouldn'tve": "wouldn't've",
    "yall": "y'all",
    "yall'll": "y'all'll",
    "y'allll": "y'all'll",
    "yall'd've": "y'all'd've",
    "y'alld've": "y'all'd've",
    "y'all'dve": "y'all'd've",
    "youd": "you'd",
    "youd've": "you'd've",
    "you'dve": "you'd've",
    "youll": "you'll",
    "youre": "you're",
    "youve": "you've",
}
"""EvalAI's contractions, the words its processor restores (lower-case keys only: it matches
lower-cased words, so the table's ``Id've``/``Im``/``Ive`` keys and its identity entries never
change a word and are left out)."""

NUMBER_WORDS = {
    "none": "0",
    "zero": "0",
    "one": "1",
    "two": "2",
    "three": "3",
    "four": "4",
    "five": "5",
    "six": "6",
    "seven": "7",
    "eight": "8",
    "nine": "9",
    "ten": "10",
}
ARTICLES = frozenset({"a", "an", "the"})
PUNCTUATION = (
    ";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",",
    "?", "!",
)  # fmt: skip
"""Removed (next to a space, or anywhere in a text with a digit-comma-digit) or made a space."""

_PERIOD = re.compile(r"(?!<=\d)(\.)(?!\d)")
"""A period not followed by a digit (the processor's pattern; its ``(?!<=\\d)`` tests nothing)."""
_PERIODS_REMOVED = 32
"""The processor passes ``re.UNICODE`` (32) as ``sub``'s count: at most 32 periods go."""
_DIGIT_COMMA_DIGIT = re.compile(r"(?<=\d)(,)+(?=\d)")


def vqa_accuracy(content: str, sol: Any) -> float:
    """VQAv2's accuracy of ``content``'s answer against the gold answers of ``sol``, in [0, 1].

    >>> golds = '["2", "2", "two", "2", "3", "2", "2", "2", "2", "2"]'
    >>> vqa_accuracy("<answer>Two.</answer>", golds), vqa_accuracy("<answer>3</answer>", golds)
    (1.0, 0.3)
    """
    return vqa_accuracy_score(content, sol).value


def vqa_accuracy_score(content: str, sol: Any) -> ComponentScore:
    """:func:`vqa_accuracy` with its outcome: ``unparseable`` when the answer is empty."""
    golds = [_gold(gold) for gold in gold_answer_texts(sol)]
    if not MIN_GOLD_ANSWERS <= len(golds) <= MAX_GOLD_ANSWERS:
        raise ValueError(
            f"solution: {len(golds)} gold answers; VQA accuracy needs {MIN_GOLD_ANSWERS} to "
            f"{MAX_GOLD_ANSWERS:,} (VQAv2 has 10; with n a right answer scores at most (n - 1) / 3)"
        )
    span = answer_span(content)
    if not span:
        return ComponentScore(0.0, Status.UNPARSEABLE, "empty answer")
    prediction = normalize_answer(span)
    if len(set(golds)) > 1:
        golds = [process_digit_article(process_punctuation(gold)) for gold in golds]
        prediction = process_digit_article(process_punctuation(prediction))
    per_subset = []
    for left_out in range(len(golds)):
        matches = sum(
            1 for index, gold in enumerate(golds) if index != left_out and gold == prediction
        )
        per_subset.append(min(1.0, matches / 3))
    return ComponentScore(statistics.mean(per_subset))


class VqaAccuracy(Component):
    """VQAv2's accuracy of the answer span against the row's gold answers (module docstring)."""

    name = "vqa_accuracy"

    def compute(self, content: str, sample: Mapping[str, Any]) -> ComponentScore:
        return vqa_accuracy_score(content, sample_solution(sample))

    def work_key(self, sample: Mapping[str, Any]) -> Hashable | None:
        return answer_work_key(self.name, sample)


def normalize_answer(text: str) -> str:
    """EvalAI's answer processor: lower-case, drop ``,`` ``?``, split ``'s``, then punctuation and digits/articles.

    >>> normalize_answer("The Dog's 2 toys, right?")
    "dog 's 2 toys right"
    """
    text = text.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    text = text.replace("\n", " ").replace("\t", " ").strip()
    return process_digit_article(process_punctuation(text))


def process_punctuation(text: str) -> str:
    """Each :data:`PUNCTUATION` mark removed (next to a space, or anywhere when digits flank a comma) or made a space; then periods not before a digit removed (at most 32).

    >>> process_punctuation("black-and-white 1,000 (?)")
    'blackandwhite 1000 '
    """
    out = text
    flanked = _DIGIT_COMMA_DIGIT.search(text) is not None
    for mark in PUNCTUATION:
        if mark + " " in text or " " + mark in text or flanked:
            out = out.replace(mark, "")
        else:
            out = out.replace(mark, " ")
    return _PERIOD.sub("", out, count=_PERIODS_REMOVED)


def process_digit_article(text: str) -> str:
    """Lower-cased words, number words made digits (``none`` is 0), articles dropped, contractions restored.

    >>> process_digit_article("The Three dont")
    "3 don't"
    """
    words = [NUMBER_WORDS.get(word, word) for word in text.lower().split()]
    return " ".join(CONTRACTIONS.get(word, word) for word in words if word not in ARTICLES)


def _gold(text: str) -> str:
    """A gold answer with newlines and tabs made spaces, stripped; ``ValueError`` past the cap."""
    if len(text) > MAX_REFERENCE_CHARS:
        raise ValueError(
            f"solution: a gold answer has {len(text):,} characters, past the "
            f"{MAX_REFERENCE_CHARS:,}-character cap"
        )
    return text.replace("\n", " ").replace("\t", " ").strip()
