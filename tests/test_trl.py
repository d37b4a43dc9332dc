"""The project's rewards inside a real TRL ``GRPOTrainer`` on CPU.

A tiny randomly initialised Qwen2 model and a byte-level BPE tokenizer are
built in the test (nothing is downloaded); the tokenizer carries TRL's own
Qwen3 chat template. The trainer generates, calls our rewards the way it calls
any reward (keyword columns, ``log_metric``...), aggregates them and steps the
optimiser. Where exact values are asserted, completions are fixed through
TRL's own ``rollout_func`` hook: the only stand-in, for the sampler.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("trl")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402
from trl import GRPOTrainer  # noqa: E402
from trl.chat_template_utils import add_response_schema, qwen3_chat_template  # noqa: E402

from skyrl_rewards.rewards.accuracy import accuracy_score  # noqa: E402
from skyrl_rewards.rewards.batch import accuracy_reward, make_reward  # noqa: E402
from skyrl_rewards.rewards.boxes.rec import iou_reward  # noqa: E402
from skyrl_rewards.rewards.contract.text import completion_text  # noqa: E402
from skyrl_rewards.rewards.text.format_checks import format_reward  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent / "models"))
from judge_server import JudgeServer, Response  # noqa: E402
from reward_model_server import RewardModelServer, conversation_text, expected_score  # noqa: E402
from trl_helpers import fixed_rollout, grpo_args, tiny_config, tiny_model  # noqa: E402

pytestmark = pytest.mark.slow

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "<think>six times seven</think>\n<answer>42</answer>",
    "What is six times seven? The answer is 41 or forty, the the the.",
    "<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n",
] * 20
PROMPT = [{"role": "user", "content": "What is six times seven?"}]

# Fixed completions (one group of four per prompt) and what each reward must give them.
FIXED = [
    "<think>six times seven</think>\n<answer>42</answer>",  # right, formatted
    "<answer>41</answer>",  # wrong number, no think block
    "<think>hmm</think>\n<answer>forty</answer>",  # formatted, wrong (shares no character with 42)
    "the the the the the the the the the the the the",  # 12 words, one distinct 6-gram of 7
]
ACCURACY = [1.0, 0.0, 0.0, 0.0]
FORMAT = [1.0, 0.0, 1.0, 0.0]
REPETITION = [0.0, 0.0, 0.0, -(1 - 1 / 7)]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE tokenizer trained here, with the Qwen3 chat template, saved to a folder."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=qwen3_chat_template,
    )
    folder = tmp_path_factory.mktemp("tokenizer")
    tokenizer.save_pretrained(folder)
    return folder


def load_tokenizer(folder: Path) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(folder)


def task_rollout(
    tokenizer: PreTrainedTokenizerFast, answers: dict[str, list[str]], wrap: Callable[[str], str]
):
    """A TRL ``rollout_func``: the i-th copy of a prompt answers ``wrap(answers[its text][i % 4])``."""

    def rollout(prompts: list[Any], trainer: GRPOTrainer) -> dict[str, list]:
        prompt_ids, completion_ids = [], []
        for index, prompt in enumerate(prompts):
            text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            prompt_ids.append(tokenizer.encode(text, add_special_tokens=False))
            answer = wrap(answers[prompt[-1]["content"]][index % 4])
            completion_ids.append(
                tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
            )
        logprobs = [[0.0] * len(ids) for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout


def one_group_step(
    tokenizer: PreTrainedTokenizerFast,
    output_dir: Path,
    rewards: list[Any],
    rows: list[dict[str, Any]],
    rollout: Any,
    *,
    completion_tokens: int,
) -> GRPOTrainer:
    """A trainer after one step over ``rows``, four completions each, all in one batch."""
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=rewards,
        args=grpo_args(
            output_dir,
            per_device_train_batch_size=4 * len(rows),
            max_steps=1,
            max_completion_length=completion_tokens,
        ),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=rollout,
    )
    trainer.train()
    return trainer


def logged(trainer: GRPOTrainer, key: str) -> list[float]:
    return [entry[key] for entry in trainer.state.log_history if key in entry]


def cosine(length: int, correct: bool) -> float:
    start, end = (1.0, 0.5) if correct else (-0.5, 0.0)
    return start + (end - start) * (1 - math.cos(min(length, 1024) * math.pi / 1024)) / 2


def project_rewards(tokenizer_dir: Path) -> list[Any]:
    return [
        accuracy_reward,
        format_reward,
        make_reward("length", tokenizer=str(tokenizer_dir)),
        make_reward("repetition"),
    ]


def test_grpo_trainer_generates_and_logs_each_reward(tokenizer_dir: Path, tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    dataset = Dataset.from_list([{"prompt": PROMPT, "solution": "<answer>42</answer>"}] * 8)
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=project_rewards(tokenizer_dir),
        args=grpo_args(tmp_path, max_steps=3),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.train()
    assert trainer.state.global_step == 3
    for name in ("accuracy_reward", "format_reward", "length_reward", "repetition_reward"):
        means = logged(trainer, f"rewards/{name}/mean")
        assert len(means) == 3 and all(math.isfinite(m) for m in means), name
    # A random model's text is judged (fuzzy matches may pay a little), never an error.
    assert all(0.0 <= m <= 1.0 for m in logged(trainer, "rewards/accuracy_reward/mean"))
    assert all(-0.5 <= m <= 0.0 for m in logged(trainer, "rewards/length_reward/mean"))
    assert logged(trainer, "rewards/accuracy_reward/masked_ratio") == [0.0] * 3


@pytest.mark.parametrize("parsed", [False, True], ids=["plain completions", "response schema"])
def test_fixed_completions_give_the_expected_rewards(
    parsed: bool, tokenizer_dir: Path, tmp_path: Path
) -> None:
    # With a response schema TRL parses each completion into reasoning_content + content:
    # the think block leaves the text and must still count as the think block.
    tokenizer = load_tokenizer(tokenizer_dir)
    if parsed:
        add_response_schema(tokenizer)
    dataset = Dataset.from_list([{"prompt": PROMPT, "solution": "<answer>42</answer>"}] * 8)
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=project_rewards(tokenizer_dir),
        args=grpo_args(tmp_path),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, FIXED),
    )
    trainer.train()
    seen = list(trainer._logs["completion"])
    if parsed:
        assert seen[0][0]["reasoning_content"] == "six times seven"  # TRL did parse it
        assert "<think>" not in seen[0][0]["content"]
    for name, values in [
        ("accuracy_reward", ACCURACY),
        ("format_reward", FORMAT),
        ("repetition_reward", REPETITION),
    ]:
        assert logged(trainer, f"rewards/{name}/mean") == pytest.approx([sum(values) / 4] * 2)
    # Length: the cosine of the token count of the text each reward reads (completion_text).
    texts = [completion_text(c) for c in seen[:4]]
    if parsed:
        assert texts[0] == "<think>\nsix times seven\n</think>\n\n<answer>42</answer>"
    else:
        assert texts == FIXED
    expected = [
        cosine(len(tokenizer.encode(text)), right == 1.0)
        for text, right in zip(texts, ACCURACY, strict=True)
    ]
    assert logged(trainer, "rewards/length_reward/mean") == pytest.approx([sum(expected) / 4] * 2)


def test_a_bad_row_is_masked_and_training_goes_on(
    tokenizer_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    bad_prompt = [{"role": "user", "content": "A row with an empty ground truth"}]
    dataset = Dataset.from_list(
        [
            {"prompt": PROMPT, "solution": "<answer>42</answer>"},
            {"prompt": bad_prompt, "solution": "<answer></answer>"},  # a dataset error
        ]
    )  # two rows: every step holds both groups
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[accuracy_reward, format_reward],
        args=grpo_args(tmp_path, per_device_train_batch_size=8),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, FIXED),
    )
    with caplog.at_level(logging.WARNING, logger="skyrl_rewards.rewards.contract.masking"):
        trainer.train()
    assert trainer.state.global_step == 2
    assert all(math.isfinite(loss) for loss in logged(trainer, "loss"))
    # TRL's nanmean leaves the masked rows out: the mean is the good group's alone.
    assert logged(trainer, "rewards/accuracy_reward/mean") == pytest.approx([0.25, 0.25])
    assert logged(trainer, "rewards/accuracy_reward/masked_ratio") == [0.5, 0.5]
    assert logged(trainer, "rewards/format_reward/mean") == pytest.approx([0.5, 0.5])
    # The masked rows reached TRL as NaN (None), the good ones as numbers.
    prompts = [p[0]["content"] for p in trainer._logs["prompt"]]
    accuracy = list(trainer._logs["rewards"]["accuracy_reward"])
    assert all(
        math.isnan(a)
        for p, a in zip(prompts, accuracy, strict=True)
        if p == bad_prompt[0]["content"]
    )
    assert not any(
        math.isnan(a) for p, a in zip(prompts, accuracy, strict=True) if p == PROMPT[0]["content"]
    )
    # One warning for the cause, not one per row or per step.
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "solution: the ground-truth answer is empty" in warnings[0]


def test_a_row_no_reward_can_score_gets_no_advantage(tokenizer_dir: Path, tmp_path: Path) -> None:
    # Only accuracy: the bad row's every reward is None, TRL zeroes its advantage.
    tokenizer = load_tokenizer(tokenizer_dir)
    bad_prompt = [{"role": "user", "content": "A row with an empty ground truth"}]
    dataset = Dataset.from_list(
        [
            {"prompt": PROMPT, "solution": "<answer>42</answer>"},
            {"prompt": bad_prompt, "solution": "<answer></answer>"},
        ]
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[accuracy_reward],
        args=grpo_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, FIXED),
    )
    trainer.train()
    prompts = [p[0]["content"] for p in trainer._logs["prompt"]]
    advantages = list(trainer._logs["advantages"])
    bad = [a for p, a in zip(prompts, advantages, strict=True) if p == bad_prompt[0]["content"]]
    good = [a for p, a in zip(prompts, advantages, strict=True) if p == PROMPT[0]["content"]]
    assert bad == [0.0] * 4
    assert good[0] > 0 and all(a < 0 for a in good[1:])  # only the right answer is reinforced
    assert math.isfinite(logged(trainer, "loss")[0])


def test_raise_setting_stops_training_at_a_bad_row(tokenizer_dir: Path, tmp_path: Path) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    dataset = Dataset.from_list([{"prompt": PROMPT, "solution": "<answer></answer>"}] * 4)
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[make_reward("accuracy", on_error="raise")],
        args=grpo_args(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, FIXED),
    )
    with pytest.raises(ValueError, match="accuracy_reward: sample 0: solution"):
        trainer.train()


def test_iou_reads_the_grid_column_and_masks_a_grid_of_other_resize_settings(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    # TRL hands every dataset column to the reward: the box is scaled from Qwen2.5-VL's resized
    # input (644x476 for 640x480) to the image; a grid the processor would not make is masked.
    from PIL import Image

    image = tmp_path / "image.png"
    Image.new("RGB", (640, 480)).save(image)
    tokenizer = load_tokenizer(tokenizer_dir)
    row = {"solution": "<answer>[160, 120, 320, 240]</answer>", "image_path": str(image)}
    dataset = Dataset.from_list(
        [
            {"prompt": PROMPT, **row, "image_grid_thw": [1, 34, 46]},
            {
                "prompt": [{"role": "user", "content": "other grid"}],
                **row,
                "image_grid_thw": [1, 20, 30],
            },
        ]
    )
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[iou_reward],
        args=grpo_args(tmp_path, per_device_train_batch_size=8, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, ["<answer>[161, 119, 322, 238]</answer>"] * 4),
    )
    trainer.train()
    assert logged(trainer, "rewards/iou_reward/mean") == pytest.approx([1.0])  # scaled: exact
    assert logged(trainer, "rewards/iou_reward/masked_ratio") == [0.5]


def test_judge_rewards_score_and_mask_inside_the_trainer(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    # a chat endpoint on loopback stands in for the judge model: 1.0 when the answer equals the
    # reference; the rows of the second prompt get HTTP 500 (an outage of that row's calls)
    bad_prompt = [{"role": "user", "content": "A row the judge fails on"}]

    def grade(body: dict[str, Any]) -> str:
        text = body["messages"][-1]["content"]
        match = re.search(r"Student's response: (.*)\nCorrect solution: (.*)\n", text) or re.search(
            r"A: (.*)\nRef: (.*)", text
        )
        assert match is not None, text
        return "1.0" if match.group(1) == match.group(2) else "0.0"

    def plan(number: int, body: dict[str, Any]) -> Response | None:
        failing = bad_prompt[0]["content"] in json.dumps(
            body
        ) or "Correct solution: 43" in json.dumps(body)
        return Response(500) if failing else None

    tokenizer = load_tokenizer(tokenizer_dir)
    dataset = Dataset.from_list(
        [
            {"prompt": PROMPT, "solution": "<answer>42</answer>", "accu_reward_method": "llm"},
            {"prompt": bad_prompt, "solution": "<answer>43</answer>", "accu_reward_method": "llm"},
        ]
    )
    with JudgeServer(reply=grade, plan=plan) as server:
        endpoint = {"base_url": server.url, "model": "judge", "retries": {"max_retries": 0}}
        judge = make_reward(
            "judge",
            template={"system": "Grade.", "user": "Q: {question}\nA: {answer}\nRef: {solution}"},
            **endpoint,
        )
        trainer = GRPOTrainer(
            model=tiny_model(tokenizer),
            reward_funcs=[make_reward("accuracy", judge=endpoint), judge],
            args=grpo_args(tmp_path, per_device_train_batch_size=8),
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=fixed_rollout(tokenizer, FIXED),
        )
        trainer.train()
    assert trainer.state.global_step == 2
    for name in ("accuracy_reward", "judge_reward"):
        # the good group's verdicts only (ACCURACY: one right answer of four); the rest masked
        assert logged(trainer, f"rewards/{name}/mean") == pytest.approx([0.25, 0.25]), name
        assert logged(trainer, f"rewards/{name}/masked_ratio") == [0.5, 0.5], name
    questions = [
        m["content"] for b in server.bodies for m in b["messages"] if "Q: " in str(m["content"])
    ]
    assert any(q.startswith("Q: What is six times seven?") for q in questions)  # TRL's prompt


def test_a_reward_model_scores_inside_the_trainer(tokenizer_dir: Path, tmp_path: Path) -> None:
    # A tiny random Qwen2 reward model with the policy's tokenizer (and its Qwen3 template):
    # what the trainer logs is the model's own score of the chat prompt + completion.
    from transformers import AutoTokenizer, Qwen2ForSequenceClassification

    tokenizer = load_tokenizer(tokenizer_dir)
    torch.manual_seed(1)
    config = tiny_config(tokenizer, num_labels=1, initializer_range=0.5)
    rm_dir = tmp_path / "rm"
    Qwen2ForSequenceClassification(config).save_pretrained(rm_dir)
    tokenizer.save_pretrained(rm_dir)
    dataset = Dataset.from_list([{"prompt": PROMPT, "solution": "<answer>42</answer>"}] * 8)
    trainer = GRPOTrainer(
        model=tiny_model(tokenizer),
        reward_funcs=[make_reward("reward_model", model=str(rm_dir), normalize="sigmoid")],
        args=grpo_args(tmp_path / "out"),
        train_dataset=dataset,
        processing_class=tokenizer,
        rollout_func=fixed_rollout(tokenizer, FIXED),
    )
    trainer.train()
    # the reference loads the reward model's folder the usual way: AutoTokenizer picks the
    # Qwen2 tokenizer class from its config (digits split one by one), not the policy's class
    rm_tokenizer = AutoTokenizer.from_pretrained(rm_dir)
    reward_model = Qwen2ForSequenceClassification.from_pretrained(rm_dir).eval()
    expected = []
    for answer in FIXED:
        chat = [*PROMPT, {"role": "assistant", "content": answer}]
        text = rm_tokenizer.apply_chat_template(chat, tokenize=False)
        ids = rm_tokenizer(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            raw = float(reward_model(input_ids=torch.tensor([ids])).logits[0, 0])
        expected.append(1 / (1 + math.exp(-raw)))
    assert len(set(expected)) == 4  # the four answers get four different scores
    values = list(trainer._logs["rewards"]["reward_model_reward"])
    assert values[:4] == pytest.approx(expected, abs=1e-5)
    assert logged(trainer, "rewards/reward_model_reward/mean") == pytest.approx(
        [sum(expected) / 4] * 2, abs=1e-5
    )


def test_a_served_reward_model_scores_and_masks_inside_the_trainer(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    # vLLM's /classify on loopback: each chat scored P(LABEL_1) of a hash of its text; every
    # request of the second prompt gets HTTP 500 (one input's failure), masked and left out
    bad_prompt = [{"role": "user", "content": "A row the reward model fails on"}]

    def plan(number: int, body: dict[str, Any]) -> Response | None:
        return Response(500) if bad_prompt[0]["content"] in json.dumps(body) else None

    tokenizer = load_tokenizer(tokenizer_dir)
    dataset = Dataset.from_list(
        [
            {"prompt": PROMPT, "solution": "<answer>42</answer>"},
            {"prompt": bad_prompt, "solution": ""},
        ]
    )
    with RewardModelServer(plan=plan) as server:
        reward = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm",
            input="messages",
            retries={"max_retries": 0},
            normalize={"affine": {"scale": 2.0, "shift": -1.0}},
        )
        trainer = GRPOTrainer(
            model=tiny_model(tokenizer),
            reward_funcs=[reward],
            args=grpo_args(tmp_path, per_device_train_batch_size=8),
            train_dataset=dataset,
            processing_class=tokenizer,
            rollout_func=fixed_rollout(tokenizer, FIXED),
        )
        trainer.train()
    assert server.errors >= 1  # the failure happened at the server
    expected = [
        2.0 * expected_score(conversation_text([*PROMPT, {"role": "assistant", "content": a}]))
        - 1.0
        for a in FIXED
    ]
    assert len(set(expected)) == 4
    # the last step's rewards (float32 in TRL): the good group's in order, the bad one's NaN
    logged_values = list(trainer._logs["rewards"]["reward_model_reward"])
    values = [v for v in logged_values if not math.isnan(v)]
    assert values == pytest.approx(expected, abs=1e-6) and len(logged_values) == 8
    # the masked group is left out: the mean is the good group's, not pulled towards 0.0
    assert logged(trainer, "rewards/reward_model_reward/mean") == pytest.approx(
        [sum(expected) / 4] * 2, abs=1e-6
    )
    assert logged(trainer, "rewards/reward_model_reward/masked_ratio") == [0.5, 0.5]


def _boxes(*items: tuple[list[int], str]) -> str:
    return (
        "```json\n" + json.dumps([{"bbox_2d": b, "label": label} for b, label in items]) + "\n```"
    )


CAT, DOG = ([100, 100, 200, 200], "cat"), ([300, 300, 420, 380], "dog")
# Every accuracy method but the judge: (method, solution, the four answers of its group).
METHODS = [
    ("default", "<answer>42</answer>", ["42", "41", "forty-two", "$\\frac{84}{2}$"]),
    ("mcq", "<answer>B</answer>", ["B", "(B)", "A", "none"]),
    ("yes_no", "<answer>yes</answer>", ["yes", "no", "Yes, it is", "maybe"]),
    ("all_match", "<answer>red car</answer>", ["red car", "Red car.", "a red car", "car"]),
    ("math", "<answer>$\\frac{1}{2}$</answer>", ["0.5", "$\\frac{2}{4}$", "0.4", "half"]),
    (
        "weighted_sum",
        f"<answer>{_boxes(CAT, DOG)}</answer>",
        [_boxes(CAT, DOG), _boxes(CAT), _boxes(([0, 0, 9, 9], "cat")), "none"],
    ),
] + [
    (
        method,
        f"<answer>{_boxes(CAT, DOG)}</answer>",
        [
            _boxes(CAT, DOG),
            _boxes(CAT, ([310, 300, 430, 380], "dog"), ([0, 0, 50, 50], "cat")),
            _boxes(CAT, ([300, 300, 420, 380], "zebra")),
            "None",
        ],
    )
    for method in ("map", "od_ap", "od_ap50", "odLength")
]


def test_every_accuracy_method_but_the_judge_scores_through_grpo(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    rows = [
        {
            "prompt": [{"role": "user", "content": f"Task {method}"}],
            "solution": solution,
            "accu_reward_method": method,
        }
        for method, solution, _ in METHODS
    ]
    answers = {f"Task {method}": group for method, _, group in METHODS}
    rollout = task_rollout(tokenizer, answers, lambda a: f"<think>t</think><answer>{a}</answer>")

    rewards = [accuracy_reward, make_reward("coco_map", method="od_ap50")]
    trainer = one_group_step(tokenizer, tmp_path, rewards, rows, rollout, completion_tokens=512)
    prompts = [p[-1]["content"] for p in trainer._logs["prompt"]]
    texts = [completion_text(c) for c in trainer._logs["completion"]]
    scored = list(trainer._logs["rewards"]["accuracy_reward"])
    by_method = {f"Task {method}": (method, solution) for method, solution, _ in METHODS}
    expected = [
        accuracy_score(text, by_method[prompt][1], by_method[prompt][0]).value
        for prompt, text in zip(prompts, texts, strict=True)
    ]
    assert sorted(set(prompts)) == sorted(by_method) and len(prompts) == 4 * len(METHODS)
    assert scored == pytest.approx(expected, abs=1e-6)  # TRL holds rewards as float32
    assert not any(math.isnan(value) for value in scored)
    for method, _, _ in METHODS:  # each method tells its four answers apart
        values = [v for p, v in zip(prompts, scored, strict=True) if p == f"Task {method}"]
        assert len(set(values)) > 1, method


def test_every_vision_reward_scores_through_grpo(tokenizer_dir: Path, tmp_path: Path) -> None:
    """giou, boxes_matched, gui_action, gui_point, count, ocr and anls in one trainer.

    One prompt per reward's task, four answers each. Every reward pays its own task's rows;
    on another task's row it gives what it gives outside the trainer (None for a ground truth
    it cannot read, which TRL leaves out: TRL's way of mixing tasks in one dataset).
    """
    sys.path.insert(0, str(Path(__file__).parent))
    from vision_rows import TASKS, completion

    tokenizer = load_tokenizer(tokenizer_dir)
    rows = [
        {"prompt": [{"role": "user", "content": f"Task {name}"}], **task["columns"]}
        for name, task in TASKS.items()
    ]
    answers = {f"Task {name}": task["answers"] for name, task in TASKS.items()}
    rollout = task_rollout(tokenizer, answers, completion)

    rewards = [make_reward(name) for name in TASKS]
    trainer = one_group_step(tokenizer, tmp_path, rewards, rows, rollout, completion_tokens=256)
    prompts = [p[-1]["content"].removeprefix("Task ") for p in trainer._logs["prompt"]]
    texts = [completion_text(c) for c in trainer._logs["completion"]]
    assert sorted(set(prompts)) == sorted(TASKS) and len(prompts) == 4 * len(TASKS)
    columns = [{k: [v] for k, v in TASKS[task]["columns"].items()} for task in prompts]
    for reward in rewards:
        scored = list(trainer._logs["rewards"][reward.__name__])
        outside = [
            make_reward(reward.name)([text], **row)[0]
            for text, row in zip(texts, columns, strict=True)
        ]
        expected = [math.nan if value is None else value for value in outside]
        assert scored == pytest.approx(expected, abs=1e-6, nan_ok=True), reward.name
        own = [v for task, v in zip(prompts, scored, strict=True) if task == reward.name]
        assert not any(math.isnan(v) for v in own), reward.name
        assert len(set(own)) >= 2 and max(own) > 0.9, (reward.name, own)
        masked = sum(value is None for value in outside) / len(outside)
        assert logged(trainer, f"rewards/{reward.__name__}/masked_ratio") == [pytest.approx(masked)]
