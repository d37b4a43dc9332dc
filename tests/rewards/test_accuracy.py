"""Accuracy rewards: every branch of the default reward and each per-row method."""

from __future__ import annotations

import pytest

from skyrl_rewards import accuracy_reward, default_accuracy_reward
from skyrl_rewards.rewards.accuracy import accuracy_score, default_accuracy_score, fuzzy_ratio
from skyrl_rewards.rewards.contract.result import Status


@pytest.mark.parametrize(
    ("content", "sol", "expected"),
    [
        # symbolic branch (math-verify, gold first)
        ("<answer>$\\frac{1}{2}$</answer>", "<answer>0.5</answer>", 1.0),
        ("<answer>\\boxed{2\\pi}</answer>", "<answer>$2\\pi$</answer>", 1.0),
        ("<think>x</think><answer>$x^2+2x+1$</answer>", "<answer>$(x+1)^2$</answer>", 1.0),
        # the ground truth's last answer tag is used (reference uses the first)
        ("<answer>3</answer>", "<answer>9</answer> <answer>3</answer>", 1.0),
        # digit branch: both parse as floats -> exact comparison
        ("<answer>3.51</answer>", "<answer>3.5</answer>", 0.0),  # a ratio would give 0.857
        # digit branch: one side is not a float -> Levenshtein ratio of the cleaned texts
        ("<answer>route b</answer>", "<answer>route 66</answer>", pytest.approx(0.8)),
        # choice branch: ground truth is a letter, student picks the same
        ("<answer>I choose B.</answer>", "<answer>B</answer>", 1.0),
        ("<answer>I choose C.</answer>", "<answer>B</answer>", 0.0),
        # text branch: Levenshtein on the cleaned texts
        ("<answer>A red car.</answer>", "<answer>a red car</answer>", 1.0),
        (
            "<answer>blue</answer>",
            "<answer>green</answer>",
            pytest.approx(fuzzy_ratio("blue", "green")),
        ),
        # an empty student answer scores 0.0, never ratio('', '') = 1.0
        ("<answer></answer>", "<answer>cat</answer>", 0.0),
    ],
)
def test_default_accuracy_branches(content: str, sol: str, expected: float) -> None:
    assert default_accuracy_reward(content, sol) == expected


@pytest.mark.parametrize(
    ("content", "sol", "method", "expected"),
    [
        ("<answer>B.</answer>", "<answer>B</answer>", "mcq", 1.0),
        ("<answer>(A) is right, so A.</answer>", "<answer>B</answer>", "mcq", 0.0),
        ("<answer>Yes, it is.</answer>", "<answer>yes</answer>", "yes_no", 1.0),
        ("<answer>no</answer>", "<answer>Yes</answer>", "yes_no", 0.0),
        (
            "<answer>maybe</answer>",
            "<answer>yes</answer>",
            "yes_no",
            0.0,
        ),  # reference paid 1.0 only if both lacked it
        ("<answer>Paris.</answer>", "<answer>paris</answer>", "all_match", 1.0),
        ("<answer>Paris, France</answer>", "<answer>paris</answer>", "all_match", 0.0),
        ("<answer>$\\frac{6}{4}$</answer>", "<answer>1.5</answer>", "math", 1.0),
        ("<answer>cat</answer>", "<answer>cats</answer>", "math", 0.0),  # no string fallback
        ("<answer>none</answer>", "<answer>None</answer>", "weighted_sum", 1.0),  # "none" rule
        ("<answer>```json []```</answer>", "<answer>none</answer>", "weighted_sum", 0.0),
        (
            '<answer>```json [{"bbox_2d": [0, 0, 10, 10], "label": "cat"}]```</answer>',
            '<answer>```json [{"bbox_2d": [0, 0, 10, 10], "label": "cat"}]```</answer>',
            "weighted_sum",
            1.0,
        ),
        ("<answer>7</answer>", "<answer>7</answer>", None, 1.0),  # None is default
    ],
)
def test_accuracy_methods(content: str, sol: str, method: str | None, expected: float) -> None:
    assert accuracy_score(content, sol, method).value == expected


def test_batch_dispatches_on_accu_reward_method_column() -> None:
    completions = [[{"role": "assistant", "content": "<answer>A.</answer>"}]] * 2 + [
        "<answer>yes</answer>"
    ]
    rewards = accuracy_reward(
        completions,
        solution=["<answer>A</answer>", "<answer>B</answer>", "<answer>yes</answer>"],
        accu_reward_method=["mcq", "mcq", "yes_no"],
    )
    assert rewards == [1.0, 0.0, 1.0]


@pytest.mark.parametrize(
    ("sol", "method", "field"),
    [
        ("<answer></answer>", "default", "solution"),  # empty ground truth
        ("<answer>maybe</answer>", "yes_no", "solution"),  # yes_no without yes/no
        ("<answer>x</answer>", "bogus", "accu_reward_method"),  # unknown method
    ],
)
def test_dataset_errors_name_field_and_sample(
    sol: str, method: str, field: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch form masks bad rows by default; this test checks the error it raises on request.
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match=rf"sample 1: {field}"):
        accuracy_reward(
            ["<answer>1</answer>"] * 2,
            solution=["<answer>1</answer>", sol],
            accu_reward_method=["default", method],
        )


def test_unparseable_outcomes_are_reported() -> None:
    score = default_accuracy_score("<answer></answer>", "<answer>1</answer>")
    assert (score.value, score.status) == (0.0, Status.UNPARSEABLE)
    # past the math memory cap (50,000 characters); length alone below it is no reason
    too_long = default_accuracy_score(
        "<answer>" + "1+" * 30_000 + "1</answer>", "<answer>3</answer>"
    )
    assert too_long.status is Status.UNPARSEABLE and "too long" in too_long.error


def test_answer_at_the_end_of_a_long_reasoning_trace_is_found() -> None:
    long = "<think>" + "step " * 40_000 + "</think><answer>42</answer>"  # 200,000 characters
    assert default_accuracy_reward(long, "<answer>42</answer>") == 1.0


@pytest.mark.parametrize("sol", ["<answer>.</answer>", "<answer> \n </answer>", "..."])
def test_ground_truth_empty_after_cleaning_is_a_dataset_error(
    sol: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The batch form masks bad rows by default; this test checks the error it raises on request.
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    with pytest.raises(ValueError, match="sample 0: solution: the ground-truth answer is empty"):
        accuracy_reward(["<answer>1</answer>"], solution=[sol])
