"""The reward-model runner and component, on a tiny random model and a real tokenizer built here.

No download: the tokenizer is trained in the test, the model is a 2-layer
``LlamaForSequenceClassification`` with random weights; both are saved to a
temporary folder and loaded back the way a user's model is.
"""

from __future__ import annotations

import math
import pickle
import random
from pathlib import Path
from unittest import mock

import pytest
import torch
from omegaconf import OmegaConf
from tiny_reward_model import (
    CHAT_TEMPLATE,
    build_tokenizer,
    direct_value,
    save_model,
    template_ids,
)
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaForSequenceClassification,
)

from skyrl_rewards import RewardMix, make_reward
from skyrl_rewards.rewards.contract.lanes import REWARD_MODEL_LANE, ModelOutcome, ModelRequest
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.models.reward_model import (
    RewardModelConfig,
    RewardModelRunner,
)
from skyrl_rewards.rewards.models.reward_model_component import Normalization, RewardModel
from skyrl_rewards.rewards.models.reward_model_runners import run_reward_model_requests
from skyrl_rewards.rewards.registry import build_component

PROMPTS = [
    "what is six times seven ?",
    "where is the cat ?",
    "a dog runs",
    "the answer is",
    "reasoning about the picture and the park and the sun and the mat and the dog",
]
COMPLETIONS = [
    "42",
    "the cat sits on a mat",
    "<think> a dog </think> <answer> park </answer>",
    "forty two because six times seven is forty two and the sun shines on the mat",
    "",
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny reward model whose tokenizer has a chat template."""
    return save_model(tmp_path_factory.mktemp("rm"), build_tokenizer(CHAT_TEMPLATE))


@pytest.fixture(scope="module")
def plain_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same kind of model, its tokenizer without a chat template."""
    return save_model(tmp_path_factory.mktemp("rm_plain"), build_tokenizer(None))


def _chat(prompt: str, completion: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]


def _requests(endpoint: str = "e") -> list[ModelRequest]:
    return [
        ModelRequest(REWARD_MODEL_LANE, endpoint, {"messages": _chat(p, c)})
        for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]


def test_values_equal_a_direct_transformers_forward(model_dir: Path) -> None:
    runner = RewardModelRunner({"model": str(model_dir), "device": "cpu"})
    assert runner.load_error == "" and runner.device == "cpu"
    outcomes = runner.score(_requests())
    expected = [
        direct_value(model_dir, template_ids(model_dir, _chat(p, c)))
        for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]
    assert all(o.ok for o in outcomes)
    assert [o.value for o in outcomes] == pytest.approx(expected, abs=1e-5)
    assert max(abs(v) for v in expected) > 0.1  # the values are not all near zero
    assert len(set(round(v, 6) for v in expected)) == len(expected)  # and they differ
    # one batch for all five (the budget is large), padded on the right
    assert runner.metrics.batches == 1 and runner.metrics.padded_tokens > runner.metrics.tokens
    assert [o.tokens_in for o in outcomes] == [
        len(template_ids(model_dir, _chat(p, c))) for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]


def test_bfloat16_runs_and_gives_float_values(model_dir: Path) -> None:
    # bf16 is the default on CUDA; on CPU it can be asked for (the default there is fp32)
    full = RewardModelRunner({"model": str(model_dir)})
    half = RewardModelRunner({"model": str(model_dir), "dtype": "bfloat16"})
    assert full._model.dtype == torch.float32 and half._model.dtype == torch.bfloat16
    outcomes = half.score(_requests())
    assert all(o.ok and isinstance(o.value, float) for o in outcomes)
    reference = [o.value for o in full.score(_requests())]
    assert [o.value for o in outcomes] == pytest.approx(reference, abs=0.1)


def test_the_chat_template_is_applied(model_dir: Path, plain_model_dir: Path) -> None:
    messages = _chat(PROMPTS[0], COMPLETIONS[0])
    request = ModelRequest(REWARD_MODEL_LANE, "e", {"messages": messages})
    (templated,) = RewardModelRunner({"model": str(model_dir)}).score([request])
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rendered = tokenizer.apply_chat_template(messages, tokenize=False)
    assert rendered.startswith("<|user|>") and "<|assistant|>42<|end|>" in rendered
    concatenated = tokenizer(f"{PROMPTS[0]}\n{COMPLETIONS[0]}")["input_ids"]
    assert templated.value == pytest.approx(
        direct_value(model_dir, template_ids(model_dir, messages)), abs=1e-5
    )
    assert templated.value != pytest.approx(direct_value(model_dir, concatenated), abs=1e-3)
    # a tokenizer without a template: the contents joined by a newline
    (plain,) = RewardModelRunner({"model": str(plain_model_dir)}).score([request])
    plain_ids = AutoTokenizer.from_pretrained(plain_model_dir)(f"{PROMPTS[0]}\n{COMPLETIONS[0]}")[
        "input_ids"
    ]
    assert plain.value == pytest.approx(direct_value(plain_model_dir, plain_ids), abs=1e-5)
    # a text payload is tokenized as it is
    (text,) = RewardModelRunner({"model": str(model_dir)}).score(
        [ModelRequest(REWARD_MODEL_LANE, "e", {"text": rendered})]
    )
    assert text.value == pytest.approx(templated.value, abs=1e-6)


@pytest.mark.parametrize(
    "budget, batches",
    [
        (1, 5),  # every item alone (an item larger than the budget still runs)
        (60, None),  # a few batches
        (100_000, 1),  # all at once
    ],
)
def test_batching_by_token_budget_gives_the_unbatched_values(
    model_dir: Path, budget: int, batches: int | None
) -> None:
    alone = RewardModelRunner({"model": str(model_dir), "max_tokens_per_batch": 1})
    runner = RewardModelRunner({"model": str(model_dir), "max_tokens_per_batch": budget})
    requests = _requests() * 3
    values = [o.value for o in runner.score(requests)]
    assert values == pytest.approx([o.value for o in alone.score(requests)], abs=1e-5)
    if batches is not None:
        assert runner.metrics.batches == batches * (3 if budget == 1 else 1)
    else:
        assert 1 < runner.metrics.batches < 15
    width = max(o.tokens_in for o in alone.score(requests))
    assert runner.metrics.padded_tokens <= max(budget, width) * runner.metrics.batches


def test_in_bfloat16_a_value_moves_with_its_batch_unless_batch_invariant(
    model_dir: Path,
) -> None:
    # In bf16 the products of a larger pass round differently (CPU here, GPUs the same way):
    # the fast path's value depends on what it is scored with; batch_invariant scores each
    # input alone, unpadded, so its value is the single forward's whatever the batch.
    rng = random.Random(0)
    words = " ".join(PROMPTS + COMPLETIONS).split()
    requests = [
        ModelRequest(
            REWARD_MODEL_LANE,
            "e",
            {
                "messages": _chat(
                    " ".join(rng.choices(words, k=5)), " ".join(rng.choices(words, k=n))
                )
            },
        )
        for n in [rng.randint(1, 60) for _ in range(24)]
    ]
    moved, batches = {}, {}
    for invariant in (False, True):
        runner = RewardModelRunner(
            {"model": str(model_dir), "dtype": "bfloat16", "batch_invariant": invariant}
        )
        single = [runner.score([request])[0].value for request in requests]
        batched = [o.value for o in runner.score(requests)]
        moved[invariant] = max(abs(a - b) for a, b in zip(single, batched, strict=True))
        batches[invariant] = runner.metrics.batches
    assert moved[False] > 1e-3  # the fast path's bf16 value depends on its batch
    assert moved[True] <= 1e-3  # within 1e-3 of the single unpadded forward (here: equal)
    assert batches == {False: len(requests) + 1, True: 2 * len(requests)}


def test_out_of_memory_halves_the_batch_and_retries(model_dir: Path) -> None:
    runner = RewardModelRunner({"model": str(model_dir)})
    expected = [o.value for o in runner.score(_requests())]
    forward = RewardModelRunner._forward

    def small_batches_only(self: RewardModelRunner, inputs: dict) -> list[float]:
        if len(inputs["input_ids"]) > 2:
            raise torch.OutOfMemoryError("CUDA out of memory (forced by the test)")
        return forward(self, inputs)

    with mock.patch.object(RewardModelRunner, "_forward", small_batches_only):
        outcomes = runner.score(_requests())
    assert [o.value for o in outcomes] == pytest.approx(expected, abs=1e-5)
    assert runner.metrics.oom_splits == 2  # 5 -> 2 + 3, 3 -> 1 + 2

    def never_fits(self: RewardModelRunner, inputs: dict) -> list[float]:
        raise torch.OutOfMemoryError("CUDA out of memory (forced by the test)")

    with mock.patch.object(RewardModelRunner, "_forward", never_fits):
        outcomes = runner.score(_requests()[:2])
    assert [o.failure for o in outcomes] == ["model_error"] * 2
    assert "out of memory on one input" in outcomes[0].message


def test_a_failing_item_does_not_fail_its_batch(model_dir: Path) -> None:
    runner = RewardModelRunner({"model": str(model_dir)})
    expected = [o.value for o in runner.score(_requests())]
    forward = RewardModelRunner._forward
    bad = len(template_ids(model_dir, _chat(PROMPTS[1], COMPLETIONS[1])))

    def fails_on_one(self: RewardModelRunner, inputs: dict) -> list[float]:
        if (inputs["attention_mask"].sum(dim=1) == bad).any():
            raise RuntimeError("index out of range in self")
        return forward(self, inputs)

    with mock.patch.object(RewardModelRunner, "_forward", fails_on_one):
        outcomes = runner.score(_requests())
    assert [o.ok for o in outcomes] == [True, False, True, True, True]
    assert outcomes[1].message == "forward pass failed: RuntimeError: index out of range in self"
    assert [o.value for i, o in enumerate(outcomes) if i != 1] == pytest.approx(
        [v for i, v in enumerate(expected) if i != 1], abs=1e-5
    )


def test_too_long_inputs_fail_or_are_truncated_and_recorded(model_dir: Path) -> None:
    messages = _chat(PROMPTS[4], COMPLETIONS[3])
    ids = template_ids(model_dir, messages)
    request = ModelRequest(REWARD_MODEL_LANE, "e", {"messages": messages})
    short = ModelRequest(REWARD_MODEL_LANE, "e", {"messages": _chat("a", "b")})
    limit = 12
    assert len(ids) > limit
    refused, fine = RewardModelRunner({"model": str(model_dir), "max_length": limit}).score(
        [request, short]
    )
    assert refused.failure == "model_error" and fine.ok
    assert refused.message.startswith(
        f"input of {len(ids)} tokens is longer than max_length={limit}"
    )
    for side, kept in (("left", ids[-limit:]), ("right", ids[:limit])):
        runner = RewardModelRunner(
            {"model": str(model_dir), "max_length": limit, "truncation": side}
        )
        cut, _ = runner.score([request, short])
        assert cut.ok and cut.tokens_in == limit and runner.metrics.truncated == 1
        assert cut.message.startswith(f"truncated from {len(ids)} to {limit} tokens")
        assert cut.value == pytest.approx(direct_value(model_dir, kept), abs=1e-5)


@pytest.mark.parametrize(
    "payload, message",
    [
        ({"messages": []}, "payload: expected 'messages'"),  # nothing to score
        ({"messages": [{"role": "user", "content": 3}]}, "payload.messages[0]"),  # not text
        ({"text": None}, "payload.text: expected a string"),
        ("not a mapping", "payload: expected a mapping"),
    ],
)
def test_unreadable_payloads_are_model_errors(
    model_dir: Path, payload: object, message: str
) -> None:
    good = ModelRequest(REWARD_MODEL_LANE, "e", {"text": "a cat"})
    bad = ModelRequest(REWARD_MODEL_LANE, "e", payload)  # type: ignore[arg-type]
    outcome, fine = RewardModelRunner({"model": str(model_dir)}).score([bad, good])
    assert outcome.failure == "model_error" and message in outcome.message and fine.ok


def test_a_template_that_refuses_the_messages_fails_that_input(tmp_path: Path) -> None:
    strict = (
        "{% for m in messages %}{% if m['role'] == 'system' %}"
        "{{ raise_exception('system messages are not supported') }}{% endif %}"
        "<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    )
    folder = save_model(tmp_path / "strict", build_tokenizer(strict))
    system = [{"role": "system", "content": "be brief"}, *_chat("a", "b")]
    refused, fine = RewardModelRunner({"model": str(folder)}).score(
        [
            ModelRequest(REWARD_MODEL_LANE, "e", {"messages": system}),
            ModelRequest(REWARD_MODEL_LANE, "e", {"messages": _chat("a", "b")}),
        ]
    )
    assert refused.failure == "model_error" and fine.ok
    assert refused.message == "chat template: TemplateError: system messages are not supported"


def test_a_load_error_fails_every_request(tmp_path: Path, model_dir: Path) -> None:
    missing = RewardModelRunner({"model": str(tmp_path / "nothing")})
    assert "failed to load" in missing.load_error
    outcomes = missing.score(_requests()[:2])
    assert [o.failure for o in outcomes] == ["model_error"] * 2
    assert str(tmp_path / "nothing") in outcomes[0].message
    # a classifier with two labels is not a reward model
    model = AutoModelForSequenceClassification.from_pretrained(model_dir)
    model.config.num_labels = 2
    two = tmp_path / "two_labels"
    LlamaForSequenceClassification(model.config).save_pretrained(two)
    AutoTokenizer.from_pretrained(model_dir).save_pretrained(two)
    assert "has 2 labels" in RewardModelRunner({"model": str(two)}).load_error


@pytest.mark.parametrize(
    "device, message",
    [
        ("no_such_device", "failed to load: RuntimeError"),  # torch does not know it
        pytest.param(
            "cuda",
            "is not usable here",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is there"),
        ),
    ],
)
def test_an_unusable_device_is_a_load_error(model_dir: Path, device: str, message: str) -> None:
    runner = RewardModelRunner({"model": str(model_dir), "device": device})
    assert message in runner.load_error
    (outcome,) = runner.score(_requests()[:1])
    assert outcome.failure == "model_error" and message in outcome.message


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model": ""}, "model: expected a folder path"),
        ({"model": "m", "dtype": "int8"}, "dtype: expected one of"),
        ({"model": "m", "max_length": 0}, "max_length: expected a positive integer"),
        ({"model": "m", "max_tokens_per_batch": 1.5}, "max_tokens_per_batch"),
        ({"model": "m", "truncation": "middle"}, "truncation: expected one of"),
        ({"model": "m", "batch_invariant": "yes"}, "batch_invariant: expected true or false"),
        ({"model": "m", "batch": 3}, "bad configuration"),  # an unknown key
    ],
)
def test_bad_runner_configurations_raise(config: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RewardModelConfig.from_mapping(config)


def test_in_process_runs_load_each_model_once(model_dir: Path) -> None:
    component = RewardModel(str(model_dir))
    other = RewardModel(str(model_dir), max_length=64)  # another endpoint
    requests = [
        component.lane_request({"prompt": p, "completion": c})
        for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]
    requests += [other.lane_request({"prompt": PROMPTS[0], "completion": "42"})]
    endpoints = {**component.endpoints(), **other.endpoints()}
    first = run_reward_model_requests(requests, endpoints)
    from skyrl_rewards.rewards.models import reward_model_runners

    runners = {key: reward_model_runners._RUNNERS[key] for key in endpoints}
    second = run_reward_model_requests(requests, endpoints)
    assert {key: reward_model_runners._RUNNERS[key] for key in endpoints} == runners
    assert [o.value for o in first] == [o.value for o in second]
    assert first[-1].value == pytest.approx(first[0].value, abs=1e-5)


@pytest.mark.parametrize(
    "normalize, clip, raw, expected",
    [
        ("none", None, 2.5, 2.5),
        ("sigmoid", None, 0.0, 0.5),
        ("sigmoid", None, -1000.0, 0.0),  # no overflow
        ({"affine": {"scale": 0.5, "shift": 1.0}}, None, 3.0, 2.5),
        ({"affine": {"scale": 2.0}}, [-1.0, 1.0], 3.0, 1.0),  # clipped
        ("none", [0, 1], -4.0, 0.0),
    ],
)
def test_normalisation(normalize: object, clip: object, raw: float, expected: float) -> None:
    component = RewardModel("m", normalize=normalize, clip=clip)
    request = component.lane_request({"prompt": "p", "completion": "c"})
    score = component.settle(request, ModelOutcome(value=raw))
    assert score.status is Status.OK and score.value == pytest.approx(expected)


@pytest.mark.parametrize(
    "outcome, status, message",
    [
        (
            ModelOutcome(failure="model_error", message="out of memory"),
            Status.ERROR,
            "reward model model_error: out of memory",
        ),
        (
            ModelOutcome(failure="timeout", message="no answer in 30 s"),
            Status.TIMEOUT,
            "reward model timeout: no answer in 30 s",
        ),
        (ModelOutcome(failure="lane_lost", message="worker died"), Status.ERROR, "lane_lost"),
        (ModelOutcome(value=math.nan), Status.ERROR, "non-finite value"),  # never scored
    ],
)
def test_failures_settle_masked_never_as_a_score(
    outcome: ModelOutcome, status: Status, message: str
) -> None:
    component = RewardModel("m", normalize="sigmoid")
    score = component.settle(component.lane_request({"prompt": "p", "completion": "c"}), outcome)
    assert score.status is status and message in score.error


@pytest.mark.parametrize(
    "params, message",
    [
        ({"normalize": "tanh"}, "normalize: expected"),
        ({"normalize": {"affine": {"scale": "x"}}}, "scale and shift must be numbers"),
        ({"normalize": {"affine": {"slope": 1}}}, "normalize.affine"),
        ({"clip": [1, 0]}, "clip: expected"),
        ({"prompt_field": 3}, "prompt_field"),
        ({"max_length": -1}, "max_length"),
        ({"temperature": 1}, "unknown parameter"),
    ],
)
def test_bad_component_parameters_raise(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        build_component("reward_model", {"model": "m", **params})


def test_batch_invariant_is_for_a_local_model() -> None:
    assert RewardModel("m", batch_invariant=True).config.batch_invariant
    with pytest.raises(ValueError, match="batch_invariant is for a local model"):
        RewardModel(base_url="http://127.0.0.1:1/v1", model="m", batch_invariant=True)


def test_prompt_columns_and_requests() -> None:
    component = RewardModel("m")
    assert component.lane({}) == REWARD_MODEL_LANE
    chat = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "where?"}]},
    ]
    request = component.lane_request(
        {
            "prompt": chat,
            "problem": "ignored",
            "completion": [{"role": "assistant", "content": "here"}],
        }
    )
    assert request.payload == {
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "where?"},  # text parts kept
            {"role": "assistant", "content": "here"},
        ]
    }
    assert request.endpoint in component.endpoints()
    # VLM-R1 rows: `problem`
    assert component.lane_request({"problem": "2+2?", "completion": "4"}).payload["messages"][
        0
    ] == {"role": "user", "content": "2+2?"}
    # a named column
    named = RewardModel("m", prompt_field="question")
    assert (
        named.lane_request({"question": "q", "prompt": "p", "completion": "a"}).payload["messages"][
            0
        ]["content"]
        == "q"
    )
    with pytest.raises(ValueError, match="prompt or problem: missing"):
        component.lane_request({"completion": "4"})
    with pytest.raises(ValueError, match="question: missing"):
        named.lane_request({"prompt": "p", "completion": "4"})


def test_work_keys_follow_the_input_and_the_normalisation() -> None:
    plain, squashed = RewardModel("m"), RewardModel("m", normalize="sigmoid")
    sample = {"prompt": "p", "completion": "c"}
    assert plain.work_key(sample) == RewardModel("m").work_key(dict(sample))
    assert plain.work_key(sample) != squashed.work_key(sample)
    assert plain.work_key(sample) != plain.work_key({"prompt": "p", "completion": "d"})
    assert plain.work_key(sample) != RewardModel("m2").work_key(sample)
    assert plain.work_key({"completion": "c"}) is None  # no prompt: not keyed
    # the component itself pickles (a pool ships it to its workers)
    assert pickle.loads(pickle.dumps(squashed)).work_key(sample) == squashed.work_key(sample)


def test_component_score_runs_in_process(model_dir: Path, tmp_path: Path) -> None:
    component = build_component("reward_model", {"model": model_dir, "normalize": "sigmoid"})
    score = component.score({"prompt": PROMPTS[0], "completion": COMPLETIONS[0]})
    raw = direct_value(model_dir, template_ids(model_dir, _chat(PROMPTS[0], COMPLETIONS[0])))
    assert score.status is Status.OK and score.value == pytest.approx(
        1 / (1 + math.exp(-raw)), abs=1e-6
    )
    missing = build_component("reward_model", {"model": str(tmp_path / "none")})
    failed = missing.score({"prompt": "p", "completion": "c"})
    assert failed.status is Status.ERROR and "failed to load" in failed.error


def test_a_mix_from_yaml_scores_with_the_reward_model(model_dir: Path) -> None:
    config = OmegaConf.create(
        f"""
        reward_model:
          weight: 0.5
          model: {model_dir}
          normalize: {{affine: {{scale: 2.0, shift: 1.0}}}}
          clip: [-100, 100]
        format:
          weight: 1.0
        """
    )
    mix = RewardMix.from_config(config)
    result = mix.score({"problem": PROMPTS[0], "completion": COMPLETIONS[0]})
    raw = direct_value(model_dir, template_ids(model_dir, _chat(PROMPTS[0], COMPLETIONS[0])))
    assert result.status == {"reward_model": "ok", "format": "ok"}
    assert result.components["reward_model"] == pytest.approx(2 * raw + 1, abs=1e-5)
    assert result.total == pytest.approx(0.5 * (2 * raw + 1), abs=1e-5)
    masked = mix.score({"completion": "no prompt here"})
    assert masked.should_mask and "missing from the row" in masked.errors["reward_model"]
    # the omegaconf nodes themselves are accepted too (a config not converted first)
    clip = OmegaConf.create({"c": [0, 1]}).c
    assert RewardModel("m", clip=clip).normalization.clip == (0.0, 1.0)


def test_trl_batch_reward_gives_floats_and_none(model_dir: Path) -> None:
    reward = make_reward("reward_model", model=str(model_dir))
    assert reward.__name__ == "reward_model_reward"
    prompts = [_chat(p, "")[:1] for p in PROMPTS]  # TRL's conversational prompts
    values = reward(COMPLETIONS, prompts=prompts, solution=[None] * 5)
    expected = [
        direct_value(model_dir, template_ids(model_dir, _chat(p, c)))
        for p, c in zip(PROMPTS, COMPLETIONS, strict=True)
    ]
    assert all(isinstance(v, float) for v in values)
    assert values == pytest.approx(expected, abs=1e-5)
    # a row without a prompt and a too-long row are masked (None), the rest scored
    strict = make_reward("reward_model", model=str(model_dir), max_length=12)
    values = strict(["42", COMPLETIONS[3], "42"], problem=[PROMPTS[0], PROMPTS[4], None])
    assert values[0] == pytest.approx(expected[0], abs=1e-5) and values[1:] == [None, None]
    # the pickle round trip gives the same reward
    copy = pickle.loads(pickle.dumps(reward))
    assert copy.__name__ == reward.__name__
    assert copy(COMPLETIONS, prompts=prompts) == pytest.approx(expected, abs=1e-5)


def test_trl_batch_reward_masks_everything_when_the_model_does_not_load(tmp_path: Path) -> None:
    reward = make_reward("reward_model", model=str(tmp_path / "none"))
    assert reward(["a", "b"], prompts=["p", "q"]) == [None, None]
    with pytest.raises(ValueError, match="failed to load"):
        make_reward("reward_model", model=str(tmp_path / "none"), on_error="raise")(
            ["a"], prompts=["p"]
        )


def test_normalization_doc_example() -> None:
    assert (
        Normalization.parse({"affine": {"scale": 2.0, "shift": 1.0}}, clip=(0.0, 4.0))(3.0) == 4.0
    )
