"""Batch reward functions (TRL convention), the registry, and the reward mix."""

from __future__ import annotations

import math
import pickle

import pytest
from transformers import PreTrainedTokenizerFast

from skyrl_rewards import RewardMix, Status, cosine_reward, default_accuracy_reward, make_reward
from skyrl_rewards.rewards.registry import COMPONENTS, build_component
from skyrl_rewards.rewards.text.shaping import WordTokenizer

FORMATTED = "<think>t</think><answer>2</answer>"
RULE_BASED = sorted(set(COMPONENTS) - {"judge", "reward_model"})
"""Rewards scored by rules (model-based ones need a model; their own tests pickle them)."""


@pytest.mark.parametrize("name", RULE_BASED)
def test_every_batch_reward_pickles_and_keeps_its_name(name: str) -> None:
    reward = make_reward(name)
    clone = pickle.loads(pickle.dumps(reward))
    assert clone.__name__ == reward.__name__ == f"{name}_reward"
    completions = [
        [{"role": "assistant", "content": "<think>t</think><answer>[1, 2, 3, 4]</answer>"}]
    ]
    solution = (
        ["<answer>[1, 2, 3, 4]</answer>"]
        if name in ("iou", "format_rec", "giou")
        else ["<answer>4</answer>"]
    )
    if name in ("detection", "coco_map", "boxes_matched"):
        solution = ['<answer>```json [{"bbox_2d": [1, 2, 3, 4], "label": "a"}]```</answer>']
    if name == "gui_action":
        solution = ['<answer>{"action": "click", "bbox": [0, 0, 10, 10]}</answer>']
    if name == "gui_point":
        solution = ["<answer>[1, 2, 3, 4]</answer>"]
    content = completions[0][0]["content"]
    expected = {
        "iou": 1.0,
        "format_rec": 0.0,  # no braces around the box
        "detection": 0.0,  # no JSON list
        "coco_map": 0.0,  # no JSON list
        "giou": 1.0,  # the same box
        "boxes_matched": 0.0,  # no JSON list
        "gui_action": 0.0,  # a box is no action
        "gui_point": 1.0,  # the target box itself
        "count": 1.0,  # the last number of "[1, 2, 3, 4]" is the count, 4
        "ocr": 0.0,  # "[1, 2, 3, 4]" against "4": more edits than characters
        "anls": 0.0,  # far past the 0.5 threshold
        "accuracy": default_accuracy_reward(content, solution[0]),
        "format": 1.0,
        "repetition": 0.0,
        "length": cosine_reward(
            content, WordTokenizer(), default_accuracy_reward(content, solution[0])
        ),
    }
    assert clone(completions, solution=solution) == pytest.approx([expected[name]])


def test_extra_kwargs_are_ignored() -> None:
    reward = make_reward("format")
    assert reward([FORMATTED], solution=["2"], prompts=["p"], some_column=[1]) == [1.0]


def test_length_reward_with_a_real_tokenizer(bpe_tokenizer: PreTrainedTokenizerFast) -> None:
    reward = make_reward("length", tokenizer=bpe_tokenizer, max_len=8)
    content = "<answer>cat cat cat cat</answer>"
    tokens = len(bpe_tokenizer.encode(content))
    progress = (1 - math.cos(min(tokens, 8) * math.pi / 8)) / 2
    right, wrong = reward(
        [content] * 2, solution=["<answer>cat cat cat cat</answer>", "<answer>dog</answer>"]
    )
    assert right == pytest.approx(1.0 - 0.5 * progress)
    assert wrong == pytest.approx(-0.5 + 0.5 * progress)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("nope", {}, "unknown reward"),
        ("detection", {"alpha": -1.0}, "rewards.detection"),
        ("iou", {"patch_size": 0}, "patch_size"),
        ("length", {"bogus": 1}, "rewards.length"),
        ("accuracy", {"math_guard": "signals"}, "math_guard"),
    ],
)
def test_bad_parameters_fail_at_build_time(name: str, params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_component(name, params)


def test_mix_weighted_total_components_and_status() -> None:
    mix = RewardMix.from_config({"accuracy": {"weight": 1.0}, "format": {"weight": 0.5}})
    result = mix.score({"completion": FORMATTED, "solution": "<answer>2</answer>"})
    assert result.total == 1.5
    assert result.components == {"accuracy": 1.0, "format": 1.0}
    assert result.status == {"accuracy": "ok", "format": "ok"}
    assert result.errors == {} and not result.should_mask


def test_mix_records_dataset_errors_without_raising() -> None:
    mix = RewardMix.from_config({"accuracy": {"weight": 1.0}, "format": {"weight": 1.0}})
    result = mix.score({"completion": FORMATTED})  # no solution
    assert result.status["accuracy"] == Status.ERROR.value
    assert "solution" in result.errors["accuracy"]
    assert result.components["format"] == 1.0 and result.should_mask


def test_mix_from_omegaconf() -> None:
    from omegaconf import OmegaConf

    mix = RewardMix.from_config(OmegaConf.create({"format": {"weight": 2}}))
    assert mix.weights == {"format": 2.0}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({}, "empty"),
        ({"format": {"weight": "x"}}, "rewards.format.weight"),
        ({"acc": {}}, "unknown reward"),
    ],
)
def test_mix_config_errors(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RewardMix.from_config(config)


def test_work_keys_match_for_identical_answers() -> None:
    mix = RewardMix.from_config({"accuracy": {}, "format": {}})
    a = {
        "completion": "<think>long reasoning A</think><answer>2</answer>",
        "solution": "<answer>2</answer>",
    }
    b = {
        "completion": "<think>other reasoning B</think><answer>2</answer>",
        "solution": "<answer>2</answer>",
    }
    assert mix.work_key("accuracy", a) == mix.work_key("accuracy", b) is not None
    assert mix.work_key("format", a) is None


@pytest.mark.parametrize("name", ["accuracy", "iou", "detection", "coco_map"])
def test_work_keys_are_small_digests(name: str) -> None:
    # issue 11: a key held the whole completion (no <answer> tag): 50 MB per 1,000 items
    mix = RewardMix.from_config({name: {}})
    long_a = {"completion": "a" * 50_000, "solution": "<answer>1</answer>"}
    long_b = {"completion": "a" * 49_999 + "b", "solution": "<answer>1</answer>"}
    key_a, key_b = mix.work_key(name, long_a), mix.work_key(name, long_b)
    assert key_a != key_b and key_a == mix.work_key(name, dict(long_a))
    assert sum(len(part) for part in key_a) < 100


def test_work_keys_depend_on_the_method() -> None:
    mix = RewardMix.from_config({"accuracy": {}})
    sample = {"completion": "<answer>yes</answer>", "solution": "<answer>yes</answer>"}
    assert mix.work_key("accuracy", sample) != mix.work_key(
        "accuracy", {**sample, "accu_reward_method": "yes_no"}
    )


@pytest.mark.parametrize("method", ["map", "od_ap"])
def test_work_keys_of_the_map_methods_read_past_the_answer_span(method: str) -> None:
    # map reads boxes anywhere in the completion; od_ap scores 0.0 without an answer tag
    mix = RewardMix.from_config({"accuracy": {}, "coco_map": {"method": method}})
    block = '```json [{"bbox_2d": [1, 2, 30, 40], "label": "a"}] ```'
    sample = {"completion": f"<answer>{block}</answer>", "solution": f"<answer>{block}</answer>"}
    other = {**sample, "completion": f"<think>{block}</think><answer>{block}</answer>"}
    untagged = {**sample, "completion": block}
    for name, row in (("accuracy", {"accu_reward_method": method}), ("coco_map", {})):
        keys = {mix.work_key(name, {**s, **row}) for s in (sample, other, untagged)}
        assert len(keys) == 3 and None not in keys
