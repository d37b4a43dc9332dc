"""relaxed_accuracy (ChartQA) and vqa_accuracy (VQAv2): the rules, hardening, and the anchors' procedures.

Each reference below is transcribed from the anchor's rules, step by step, and compared
with the reward on generated cases.
"""

from __future__ import annotations

import json
import random
import re
import statistics
import time

import pytest
import skyrl_gym

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.documents.relaxed_accuracy import (
    relaxed_accuracy,
    relaxed_accuracy_score,
)
from skyrl_rewards.rewards.documents.vqa_accuracy import (
    CONTRACTIONS,
    vqa_accuracy,
    vqa_accuracy_score,
)
from skyrl_rewards.rewards.mix import RewardMix
from skyrl_rewards.rewards.registry import build_component
from skyrl_rewards.train.env import ENV_ID

# --- ChartQA, lmms-eval's relaxed_correctness (lmms_eval/tasks/chartqa/utils.py, from
# Qwen-VL's eval_mm/evaluate_vqa.py): each text as float (a trailing "%" stripped and /100),
# None when float refuses it; both numbers and the gold truthy: |p - t| / |t| <= 0.05;
# otherwise the lower-cased texts equal.


def lmms_relaxed_correctness(prediction: str, target: str, max_relative_change: float = 0.05):
    def to_float(text: str):
        try:
            if text.endswith("%"):
                return float(text.rstrip("%")) / 100.0
            return float(text)
        except ValueError:
            return None

    prediction_float = to_float(prediction)
    target_float = to_float(target)
    if prediction_float is not None and target_float:
        return abs(prediction_float - target_float) / abs(target_float) <= max_relative_change
    return prediction.lower() == target.lower()


_CHART_WORDS = ["Yes", "No", "Brazil", "brazil", "2019", "Q3", "Male", "Democrats", "N/A"]


def chart_gold(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.45:
        return f"{rng.uniform(-500, 500):.{rng.randint(0, 3)}f}"
    if roll < 0.55:
        return f"{rng.uniform(0, 100):.{rng.randint(0, 2)}f}%"
    if roll < 0.6:
        return rng.choice(["0", "0.0", "0%", "nan", "inf", "1e3"])
    return rng.choice(_CHART_WORDS)


def chart_answer(rng: random.Random, gold: str) -> str:
    roll = rng.random()
    number = None
    try:
        number = float(gold.rstrip("%")) / (100 if gold.endswith("%") else 1)
    except ValueError:
        pass
    if number is not None and roll < 0.6:
        changed = number * rng.choice([1, 1.03, 0.96, 1.05, 0.95, 1.051, 1.2, -1, 0])
        form = rng.random()
        if form < 0.2 and gold.endswith("%"):
            return f"{changed * 100:g}%"
        if form < 0.3:
            return f"{changed:.1e}"
        if form < 0.4:
            return f" {changed:g} "  # float() takes the spaces; the span is stripped anyway
        return f"{changed:g}"
    if roll < 0.8:
        return rng.choice([gold, gold.upper(), gold.lower(), gold + ".", "The answer is " + gold])
    return rng.choice(_CHART_WORDS + ["", "12", "1_000", "50%%", "-0", "∞"])


def test_differential_lmms_eval_relaxed_correctness() -> None:
    """Equal to lmms-eval's rules on 3,000 generated cases (one gold each, and a gold list)."""
    rng = random.Random("chartqa")
    right = numeric_right = 0
    for _ in range(3000):
        gold = chart_gold(rng)
        answer = chart_answer(rng, gold)
        span = answer.strip()
        if not span:
            continue  # an empty answer: unparseable, 0.0 here
        expected = 1.0 if lmms_relaxed_correctness(span, gold) else 0.0
        got = relaxed_accuracy(
            f"<think>x</think><answer>{answer}</answer>", f"<answer>{gold}</answer>"
        )
        assert got == expected, (answer, gold)
        right += got == 1.0
        numeric_right += got == 1.0 and span.lower() != gold.lower()
        others = [chart_gold(rng) for _ in range(rng.randint(0, 2))]
        golds = [*others, gold]
        best = max(1.0 if lmms_relaxed_correctness(span, g) else 0.0 for g in golds)
        assert relaxed_accuracy(f"<answer>{answer}</answer>", golds) == best
        assert relaxed_accuracy(f"<answer>{answer}</answer>", json.dumps(golds)) == best
    assert right > 600 and numeric_right > 300


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("41", "43", 1.0),  # 4.7% off
        ("40", "43", 0.0),  # 7% off
        ("12%", "0.12", 1.0),  # a percentage is its fraction
        ("0.12", "12%", 1.0),
        ("12", "12%", 0.0),  # 12 against 0.12
        ("0", "0", 1.0),  # a zero gold compares as text
        ("0.0", "0", 0.0),
        ("Brazil", "brazil", 1.0),  # case ignored
        ("Brazil.", "Brazil", 0.0),  # anything else exact
        ("1,000", "1000", 0.0),  # float() refuses the comma: compared as text
    ],
)
def test_relaxed_accuracy_rules(answer: str, gold: str, expected: float) -> None:
    assert relaxed_accuracy(f"<answer>{answer}</answer>", gold) == expected


def test_relaxed_accuracy_tolerance_and_outcomes() -> None:
    assert relaxed_accuracy("<answer>45</answer>", "50", max_relative_change=0.1) == 1.0
    assert relaxed_accuracy_score("<answer> </answer>", "5").status is Status.UNPARSEABLE
    for bad in (-0.1, float("nan"), "5%", True):
        with pytest.raises(ValueError, match="^max_relative_change: "):
            relaxed_accuracy("<answer>5</answer>", "5", max_relative_change=bad)  # type: ignore[arg-type]
    for sol in ("<answer></answer>", "[]", '["a", 3]', 7):
        with pytest.raises(ValueError, match="^solution: "):
            relaxed_accuracy("<answer>5</answer>", sol)
    start = time.process_time()
    assert relaxed_accuracy("<answer>" + "9" * 1_000_000 + "</answer>", "5") == 0.0
    assert time.process_time() - start < 1.0


# --- VQAv2, lmms-eval's vqav2_process_results (lmms_eval/tasks/vqav2/utils.py) with its
# EvalAIAnswerProcessor (lmms_eval/tasks/_task_utils/vqa_eval_metric.py, after mmf), step by step.

_PUNCT = [";", r"/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@"]
_PUNCT += ["`", ",", "?", "!"]
_NUMBERS = {"none": "0", "zero": "0", "one": "1", "two": "2", "three": "3", "four": "4"}
_NUMBERS |= {"five": "5", "six": "6", "seven": "7", "eight": "8", "nine": "9", "ten": "10"}
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")
_COMMA_STRIP = re.compile(r"(?<=\d)(\,)+(?=\d)")


def evalai_process_punctuation(in_text: str) -> str:
    out_text = in_text
    for p in _PUNCT:
        if (p + " " in in_text or " " + p in in_text) or (
            re.search(_COMMA_STRIP, in_text) is not None
        ):
            out_text = out_text.replace(p, "")
        else:
            out_text = out_text.replace(p, " ")
    return _PERIOD_STRIP.sub("", out_text, re.UNICODE)  # noqa: B034  the processor's own call


def evalai_process_digit_article(in_text: str) -> str:
    out_text = []
    for word in in_text.lower().split():
        word = _NUMBERS.setdefault(word, word)
        if word not in ["a", "an", "the"]:
            out_text.append(word)
    for word_id, word in enumerate(out_text):
        if word in CONTRACTIONS:
            out_text[word_id] = CONTRACTIONS[word]
    return " ".join(out_text)


def evalai_processor(item: str) -> str:
    item = item.lower().replace(",", "").replace("?", "").replace("'s", " 's").strip()
    item = item.replace("\n", " ").replace("\t", " ").strip()
    return evalai_process_digit_article(evalai_process_punctuation(item))


def lmms_vqav2_accuracy(prediction: str, answers: list[str]) -> float:
    res_ans = evalai_processor(prediction)
    answer_dicts = [{"answer": a, "answer_id": i} for i, a in enumerate(answers)]
    for ans_dic in answer_dicts:
        ans_dic["answer"] = ans_dic["answer"].replace("\n", " ").replace("\t", " ").strip()
    gt_answers = [ans["answer"] for ans in answer_dicts]
    if len(set(gt_answers)) > 1:
        for ans_dic in answer_dicts:
            ans_dic["answer"] = evalai_process_punctuation(ans_dic["answer"])
            ans_dic["answer"] = evalai_process_digit_article(ans_dic["answer"])
        res_ans = evalai_process_punctuation(res_ans)
        res_ans = evalai_process_digit_article(res_ans)
    gt_acc = []
    for gt_ans_datum in answer_dicts:
        other_gt_ans = [item for item in answer_dicts if item != gt_ans_datum]
        matching_ans = [item for item in other_gt_ans if item["answer"] == res_ans]
        gt_acc.append(min(1, float(len(matching_ans)) / 3))
    return statistics.mean(gt_acc)


_VQA_WORDS = [
    "yes", "no", "2", "two", "red", "dark red", "the dog", "a dog", "dog's bowl", "isnt",
    "isn't", "black and white", "black-and-white", "1,000", "1000", "3.5", "tennis", "none",
    "0", "frisbee", "t-shirt", "t shirt", "left.", "(left)", "wont", "10:30", "mr. smith",
]  # fmt: skip


def vqa_case(rng: random.Random) -> tuple[str, list[str]]:
    pool = rng.sample(_VQA_WORDS, rng.randint(1, 4))
    n = rng.choice([10, 10, 10, 4, 5, 6])
    golds = [rng.choice(pool) for _ in range(n)]
    if rng.random() < 0.1:
        golds = [golds[0]] * n  # unanimous: no processing of the golds
    if rng.random() < 0.1:
        golds[0] = " " + golds[0].upper() + "\n"
    kind = rng.random()
    if kind < 0.5:
        answer = rng.choice(golds)
    elif kind < 0.7:
        answer = rng.choice(pool).upper() + rng.choice(["", ".", "?", "!", " ."])
    elif kind < 0.85:
        answer = rng.choice(["The ", "A ", ""]) + rng.choice(_VQA_WORDS)
    else:
        answer = rng.choice(_VQA_WORDS) + rng.choice([", ", "\t", " and "]) + rng.choice(_VQA_WORDS)
    return answer, golds


def test_differential_lmms_eval_vqav2() -> None:
    """Equal to lmms-eval's VQAv2 accuracy on 3,000 generated cases, bit for bit."""
    rng = random.Random("vqav2")
    values = set()
    for _ in range(3000):
        answer, golds = vqa_case(rng)
        span = answer.strip()
        if not span:
            continue
        expected = lmms_vqav2_accuracy(span, golds)
        for sol in (f"<answer>{json.dumps(golds)}</answer>", golds):
            got = vqa_accuracy(f"<think>x</think><answer>{answer}</answer>", sol)
            assert got == expected, (answer, golds)
        values.add(expected)
    assert {0.0, 1.0} < values and len(values) >= 6  # partial credit of several sizes


@pytest.mark.parametrize(
    ("answer", "golds", "expected"),
    [
        ("Yes", ["yes"] * 10, 1.0),  # the prediction is always normalised
        ("2", ["2"] * 2 + ["3"] * 8, 0.6),  # 2 of the 9 others, or 1: (8 * 2/3 + 2 * 1/3) / 10
        ("two", ["2"] * 3 + ["3"] * 7, 0.9),  # three matches: 1.0 unless one is left out
        ("The dog.", ["dog"] * 9 + ["cat"], 1.0),
        ("cat", ["dog"] * 9 + ["cat"], 0.3),  # one annotator: 1/3 in the 9 subsets keeping them
    ],
)
def test_vqa_accuracy_rules(answer: str, golds: list[str], expected: float) -> None:
    assert vqa_accuracy(f"<answer>{answer}</answer>", golds) == pytest.approx(expected)


def test_vqa_accuracy_outcomes() -> None:
    golds = ["red"] * 10
    assert vqa_accuracy_score("<answer></answer>", golds).status is Status.UNPARSEABLE
    for sol in (["red"] * 3, "red", "[]", '["red", 1, "red", "red"]', ["x"] * 1001):
        with pytest.raises(ValueError, match="^solution: "):
            vqa_accuracy("<answer>red</answer>", sol)


# --- in the registry, TRL's batch call, and the SkyRL env


def test_registered_and_in_the_skyrl_env() -> None:
    rows = {
        "relaxed_accuracy": (
            "<answer>37.5</answer>",
            ["<answer>38</answer>", "<answer>42</answer>"],
        ),
        "vqa_accuracy": (
            json.dumps(["red"] * 7 + ["dark red"] * 3),
            ["<answer>Red</answer>", "<answer>dark red</answer>"],
        ),
    }
    for name, (solution, completions) in rows.items():
        component = build_component(name)
        batch = make_reward(name)(completions, solution=[solution] * len(completions))
        mix = RewardMix.from_config({name: {"weight": 1.0}})
        config = {"in_process": True, "rewards": {name: {"weight": 1.0}}}
        for content, value in zip(completions, batch, strict=True):
            sample = {"solution": solution, "completion": content}
            assert component.score(sample).value == value == mix.score(sample).total
            extras = {"reward_spec": {"method": "rule", "ground_truth": solution}, "max_turns": 1}
            env = skyrl_gym.make(ENV_ID, env_config=config, extras=extras)
            env.init([{"role": "user", "content": "Q"}])
            assert env.step(content)["reward"] == pytest.approx(value)
        assert batch[0] == 1.0 and batch[1] < 1.0, (name, batch)
