"""Batch (TRL) rewards: a row that cannot be scored is ``None``, warned once, counted; or raises."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from unittest import mock

import pytest
from PIL import Image

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.boxes.rec import iou_reward
from skyrl_rewards.rewards.contract.result import ComponentScore, Status

GOOD = "<think>x</think><answer>2</answer>"


class MetricLog:
    """Stands in for TRL's ``log_metric`` callable: records (name, value)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def __call__(self, name: str, value: float) -> None:
        self.calls.append((name, value))


def test_missing_solution_is_masked_warned_once_and_counted(caplog) -> None:
    reward = make_reward("accuracy")
    metric = MetricLog()
    with caplog.at_level(logging.WARNING, logger="skyrl_rewards.rewards.contract.masking"):
        first = reward([GOOD] * 3, solution=["<answer>2</answer>", None, None], log_metric=metric)
        second = reward([GOOD], solution=[None], log_metric=metric)
    assert first == [1.0, None, None] and second == [None]
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1  # one cause, one warning
    assert "accuracy_reward: sample 1 cannot be scored (error): solution" in warnings[0]
    assert "on_error='raise'" in warnings[0]
    assert metric.calls == [
        ("rewards/accuracy_reward/masked_ratio", pytest.approx(2 / 3)),
        ("rewards/accuracy_reward/masked_ratio", 1.0),
    ]


def test_each_cause_is_warned_once(caplog, tmp_path: Path) -> None:
    image = tmp_path / "img.png"
    Image.new("RGB", (64, 32)).save(image)
    rows = {
        "solution": [
            "<answer>[1, 2, 3, 4]</answer>",
            "<answer>[1]</answer>",
            "<answer>bad</answer>",
        ],
        "image_path": [str(tmp_path / "missing.png"), str(image), str(image)],
        "image_grid_thw": [[1, 2, 2]] * 3,
    }
    reward = make_reward("iou")
    with caplog.at_level(logging.WARNING, logger="skyrl_rewards.rewards.contract.masking"):
        assert reward(["<answer>[1, 2, 3, 4]</answer>"] * 3, **rows) == [None, None, None]
    fields = sorted(r.getMessage().split("(error): ")[1].split(":")[0] for r in caplog.records)
    assert fields == ["image_path", "solution"]  # two causes, two warnings


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_raise_setting_restores_the_error(how: str, monkeypatch) -> None:
    if how == "environment":
        monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
        reward = make_reward("accuracy")
    else:
        reward = make_reward("accuracy", on_error="raise")
    with pytest.raises(ValueError, match="accuracy_reward: sample 1: solution: missing"):
        reward([GOOD, GOOD], solution=["<answer>2</answer>", None])


def test_argument_wins_over_environment(monkeypatch) -> None:
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", "raise")
    assert make_reward("accuracy", on_error="mask")([GOOD], solution=[None]) == [None]


@pytest.mark.parametrize("setting", ["ignore", "RAISE!"])
def test_bad_settings_fail_clearly(setting: str, monkeypatch) -> None:
    with pytest.raises(ValueError, match="on_error"):
        make_reward("format", on_error=setting)
    monkeypatch.setenv("SKYRL_REWARDS_ON_ERROR", setting)
    with pytest.raises(ValueError, match="SKYRL_REWARDS_ON_ERROR"):
        make_reward("format")([GOOD])


def test_timeout_is_masked_or_raises_timeout_error(monkeypatch) -> None:
    # Force the slow path inside our own code: the accuracy component reports a timeout.
    timeout = ComponentScore(0.0, Status.TIMEOUT, "math-verify: past 5 s of CPU time")
    reward = make_reward("accuracy")
    with mock.patch.object(type(reward._component), "compute", return_value=timeout):
        assert reward([GOOD], solution=["<answer>2</answer>"]) == [None]
        with pytest.raises(TimeoutError, match="sample 0: math-verify"):
            make_reward("accuracy", on_error="raise")([GOOD], solution=["<answer>2</answer>"])


def test_model_text_is_never_masked() -> None:
    # Garbage from the model is a judgement (the floor), not a masked row.
    reward = make_reward("accuracy")
    assert reward([None, 123, "", "<answer>"], solution=["<answer>2</answer>"] * 4) == [0.0] * 4


def test_on_error_survives_pickling() -> None:
    reward = pickle.loads(pickle.dumps(make_reward("accuracy", on_error="raise")))
    with pytest.raises(ValueError):
        reward([GOOD], solution=[None])


def test_iou_reward_function_masks_and_logs() -> None:
    metric = MetricLog()
    rewards = iou_reward(
        ["<answer>[1, 2, 3, 4]</answer>"] * 2,
        solution=["<answer>[1, 2, 3, 4]</answer>", "<answer>oops</answer>"],
        log_metric=metric,
    )
    assert rewards == [1.0, None]
    assert metric.calls == [("rewards/iou_reward/masked_ratio", 0.5)]


def test_caller_errors_still_raise() -> None:
    with pytest.raises(ValueError, match="solution: 1 values for 2 completions"):
        iou_reward(["a", "b"], solution=["<answer>[1, 2, 3, 4]</answer>"])
    with pytest.raises(ValueError, match="box_coords"):
        iou_reward(["a"], solution=["<answer>[1, 2, 3, 4]</answer>"], box_coords="pixels")
