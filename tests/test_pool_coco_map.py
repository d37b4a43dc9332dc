"""VLM-R1's COCO mAP methods, beside the other accuracy methods, scored by a real RewardPool."""

from __future__ import annotations

import json

from skyrl_rewards.pool.reward_pool import RewardPool
from skyrl_rewards.rewards.mix import RewardMix

REWARDS = {"accuracy": {"weight": 1.0}, "coco_map": {"weight": 0.5, "method": "od_ap50"}}

CAT = {"bbox_2d": [100, 100, 200, 200], "label": "cat"}
DOG = {"bbox_2d": [300, 300, 420, 380], "label": "dog"}


def _answer(items: list, think: str = "looking") -> str:
    return f"<think>{think}</think><answer>```json\n{json.dumps(items)}\n```</answer>"


GT = _answer([CAT, DOG])
SAMPLES = (
    [
        {"completion": _answer([CAT, DOG]), "solution": GT, "accu_reward_method": method}
        for method in ("map", "od_ap", "od_ap50", "odLength")
    ]
    + [
        # half right, with a shifted dog box and a padding box
        {
            "completion": _answer(
                [CAT, {**DOG, "bbox_2d": [310, 300, 430, 380]}, {**CAT, "label": "x"}]
            ),
            "solution": GT,
            "accu_reward_method": "odLength",
        },
        # map reads the boxes in the think block too (the last block of the whole completion)
        {
            "completion": [{"role": "assistant", "content": _answer([DOG], think=_answer([CAT]))}],
            "solution": GT,
            "accu_reward_method": "map",
        },
        # no answer span: the od methods score 0.0 (unparseable)
        {"completion": "cat at 100,100", "solution": GT, "accu_reward_method": "od_ap"},
        # a malformed ground truth: a dataset error, masked
        {
            "completion": _answer([CAT]),
            "solution": '<answer>```json [{"bbox_2d": [9, 0, 5, 5], "label": "cat"}] ```</answer>',
            "accu_reward_method": "od_ap",
        },
    ]
    + [  # the other accuracy methods, side by side in the same batch
        {
            "completion": f"<answer>{answer}</answer>",
            "solution": f"<answer>{sol}</answer>",
            "accu_reward_method": method,
        }
        for method, answer, sol in [
            ("default", "\\frac{1}{2}", "0.5"),
            ("mcq", "B.", "B"),
            ("yes_no", "Yes", "yes"),
            ("all_match", "Red car.", "red car"),
            ("math", "$\\frac{2}{4}$", "$\\frac{1}{2}$"),
            (
                "weighted_sum",
                f"```json {json.dumps([CAT, DOG])} ```",
                f"```json {json.dumps([CAT, DOG])} ```",
            ),
        ]
    ]
)


def test_pool_scores_the_map_methods_as_in_process(ray_local: None) -> None:
    expected = [RewardMix.from_config(REWARDS).score(sample).to_dict() for sample in SAMPLES]
    with RewardPool.from_config(
        {"name": "test_pool_coco_map", "rewards": REWARDS, "num_workers": 1, "batch_wait_s": 0.02}
    ) as pool:
        results = pool.score(SAMPLES * 2)
    assert [{k: v for k, v in r.to_dict().items() if k != "latency_s"} for r in results] == [
        {k: v for k, v in e.items() if k != "latency_s"} for e in expected
    ] * 2
    accuracy = [r.components["accuracy"] for r in results[: len(SAMPLES)]]
    assert [round(a, 6) for a in accuracy[:4]] == [1.0] * 4
    assert 0.0 < accuracy[4] < 1.0 and 0.0 < accuracy[5] < 1.0
    assert results[6].status["accuracy"] == "unparseable" and accuracy[6] == 0.0
    assert results[7].should_mask and "x1 <= x2" in results[7].errors["accuracy"]
    assert not any(r.should_mask for r in results[:7])
    assert [r.components["accuracy"] for r in results[8 : len(SAMPLES)]] == [1.0] * 6
