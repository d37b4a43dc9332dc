"""A served reward model in this process: values, batching, masking and images, checked at the server."""

from __future__ import annotations

import base64
import io
import math
import time
from pathlib import Path
from typing import Any

import pytest
from judge_texts import load_tokenizer, save_tokenizer
from PIL import Image
from reward_model_server import (
    Response,
    RewardModelServer,
    conversation_text,
    expected_logits,
    expected_score,
    templated_texts,
)

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE
from skyrl_rewards.rewards.contract.result import Status
from skyrl_rewards.rewards.models.judge_client import judge_metrics
from skyrl_rewards.rewards.models.local import run_requests
from skyrl_rewards.rewards.registry import build_component

FAST_RETRIES = {"max_retries": 2, "backoff_base_s": 0.01, "backoff_max_s": 0.05}


def rows(count: int) -> tuple[list[str], list[str]]:
    prompts = [f"What is {i} + {i}?" for i in range(count)]
    return prompts, [f"The answer is {2 * i}." for i in range(count)]


def plain_text(prompt: str, completion: str) -> str:
    """The text input without a chat template: the contents joined by newlines (the local path's)."""
    return f"{prompt}\n{completion}"


def test_classify_values_batched_into_few_requests() -> None:
    prompts, completions = rows(24)
    with RewardModelServer(latency_s=0.05) as server:
        reward = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm",
            api="classify",
            batch_size=8,
            batch_wait_s=0.05,
        )
        values = reward(completions, prompts=prompts)
    expected = [expected_score(plain_text(p, c)) for p, c in zip(prompts, completions, strict=True)]
    assert values == pytest.approx(expected, abs=1e-9)
    assert server.items == 24 and server.requests == 3  # 8 inputs a request
    assert all(
        isinstance(body["input"], list) and len(body["input"]) == 8 for body in server.bodies
    )
    assert all(path == "/classify" for path in server.paths)


@pytest.mark.parametrize(
    "limits",
    [
        {},  # the template's tokenizer loaded for rendering only
        {"tokens_per_minute": 10_000_000},  # the one the token counter loaded, shared
    ],
)
def test_text_input_is_rendered_by_the_local_paths_chat_template(
    tmp_path: Path, limits: dict[str, int]
) -> None:
    folder = save_tokenizer(tmp_path / "tokenizer")
    prompts, completions = rows(6)
    with RewardModelServer() as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm",
            tokenizer=str(folder),
            limits=limits,
        )(completions, prompts=prompts)
    tokenizer = load_tokenizer(folder)
    texts = templated_texts(tokenizer, prompts, completions)
    assert [t for body in server.bodies for t in body["input"]] == texts
    assert all(body["add_special_tokens"] is False for body in server.bodies)
    assert values == pytest.approx([expected_score(t) for t in texts], abs=1e-9)


def test_raw_logit_with_use_activation_false_then_sigmoid() -> None:
    prompts, completions = rows(4)
    with RewardModelServer() as server:
        reward = make_reward(
            "reward_model",
            endpoint={"base_url": server.base_url, "model": "rm", "use_activation": False},
            normalize="sigmoid",
        )
        raw = make_reward(
            "reward_model",
            endpoint={"base_url": server.base_url, "model": "rm", "use_activation": False},
        )
        values, logits = reward(completions, prompts=prompts), raw(completions, prompts=prompts)
    texts = [plain_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    assert logits == pytest.approx([expected_logits(t)[1] for t in texts], abs=1e-9)
    assert values == pytest.approx([1 / (1 + math.exp(-x)) for x in logits], abs=1e-9)
    assert all(body["use_activation"] is False for body in server.bodies)


def test_pooling_index_and_generative_scoring() -> None:
    prompts, completions = rows(6)
    texts = [plain_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    with RewardModelServer() as server:
        pooled = make_reward(
            "reward_model", base_url=server.base_url, model="rm", api="pooling", index=0
        )(completions, prompts=prompts)
        scored = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm",
            api="generative_scoring",
            query="Is this answer right? ",
            label_token_ids=[9454, 2753],
        )(completions, prompts=prompts)
    assert pooled == pytest.approx([expected_logits(t)[0] for t in texts], abs=1e-9)
    assert scored == pytest.approx(
        [expected_score("Is this answer right? " + t) for t in texts], abs=1e-9
    )
    genscore = [b for b in server.bodies if "label_token_ids" in b]
    assert genscore and all(b["label_token_ids"] == [9454, 2753] for b in genscore)


def test_messages_input_sends_one_conversation_per_request() -> None:
    prompts, completions = rows(5)
    with RewardModelServer() as server:
        values = make_reward(
            "reward_model", base_url=server.base_url, model="rm", input="messages", label="LABEL_1"
        )(completions, prompts=prompts)
    chats = [
        [{"role": "user", "content": p}, {"role": "assistant", "content": c}]
        for p, c in zip(prompts, completions, strict=True)
    ]
    assert values == pytest.approx([expected_score(conversation_text(c)) for c in chats])
    assert server.requests == 5 and all("messages" in body for body in server.bodies)


def _served(server: RewardModelServer, **fields: Any) -> Any:
    return build_component(
        "reward_model",
        {"endpoint": {"base_url": server.base_url, "model": "rm", **fields}},
    )


@pytest.mark.parametrize(
    ("plan", "failure", "fault"),
    [
        (lambda n, body: Response(status=503), "http_status", "errors"),
        (
            lambda n, body: Response(status=429, headers={"Retry-After": "0"}),
            "rate_limited",
            "throttled",
        ),
        (lambda n, body: Response(text='{"data": []}'), "bad_response", "requests"),
        (lambda n, body: Response(text='{"data": [{"index": 0, "probs": [NaN, NaN]}]}'), "", ""),
    ],
)
def test_failures_are_masked_with_their_cause(plan: Any, failure: str, fault: str) -> None:
    with RewardModelServer(plan=plan) as server:
        component = _served(server, retries=FAST_RETRIES, breaker={"failures": None}, batch_size=1)
        mix_values = make_reward(
            "reward_model",
            endpoint={
                "base_url": server.base_url,
                "model": "rm",
                "retries": FAST_RETRIES,
                "breaker": {"failures": None},
                "batch_size": 1,
            },
            on_error="mask",
        )(["The answer is 2."], prompts=["1 + 1?"])
        request = component.lane_request({"prompt": "1 + 1?", "completion": "2"})
        (outcome,) = run_requests([request], component.endpoints())
        score = component.settle(request, outcome)
    assert mix_values == [None]  # masked, never 0.0
    assert score.status is Status.ERROR
    if failure:
        assert outcome.failure == failure and failure in score.error
        assert getattr(server, fault) >= 1  # the fault happened at the server
    else:
        assert "non-finite" in score.error


def test_an_outage_opens_the_breaker_and_calls_stop() -> None:
    with RewardModelServer() as server:
        server.down = True
        endpoint = {
            "base_url": server.base_url,
            "model": "rm-outage",
            "retries": FAST_RETRIES,
            "breaker": {"failures": 2, "reset_s": 60},
            "batch_size": 1,
        }
        reward = make_reward("reward_model", endpoint=endpoint)
        (key,) = build_component("reward_model", {"endpoint": endpoint}).endpoints()
        first = reward(["a"], prompts=["q"])
        later = reward(["b"], prompts=["q"])
        dropped = server.dropped
    assert first == [None] and later == [None]
    assert dropped == 2  # two calls reached the server, closed unanswered; then no more calls
    assert judge_metrics()[key]["errors"] == {"breaker_open": 2}


def test_a_slow_server_is_a_masked_timeout() -> None:
    with RewardModelServer(plan=lambda n, body: Response(delay_s=2.0)) as server:
        component = _served(server, timeout_s=0.2, retries={"max_retries": 0})
        request = component.lane_request({"prompt": "1 + 1?", "completion": "2"})
        (outcome,) = run_requests([request], component.endpoints())
        score = component.settle(request, outcome)
        requests = server.requests
    assert outcome.failure == "timeout" and score.status is Status.TIMEOUT
    assert "timeout" in score.error and requests == 1  # the call reached the server and waited


def test_a_failed_batch_fails_each_of_its_items() -> None:
    prompts, completions = rows(6)
    with RewardModelServer(plan=lambda n, body: Response(status=500)) as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm-batch-fail",
            batch_size=6,
            batch_wait_s=0.05,
            retries={"max_retries": 0},
        )(completions, prompts=prompts)
    assert values == [None] * 6 and server.requests == 1 and server.errors == 1


def test_in_flight_limit_held_at_the_server() -> None:
    prompts, completions = rows(40)
    with RewardModelServer(latency_s=0.05) as server:
        make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm-limits",
            batch_size=1,
            limits={"max_in_flight": 3},
        )(completions, prompts=prompts)
    assert server.requests == 40 and server.peak == 3


def test_tokens_per_minute_paces_the_requests() -> None:
    prompts = [f"Question {i}: " + "x" * 180 for i in range(40)]
    completions = ["yes"] * 40
    with RewardModelServer() as server:
        reward = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm-tpm",
            batch_size=4,
            limits={"tokens_per_minute": 60_000},  # 1,000 a second
        )
        started = time.monotonic()
        values = reward(completions, prompts=prompts)
        elapsed = time.monotonic() - started
    served_tokens = sum(len(t) // 4 for t in (plain_text(p, "yes") for p in prompts))
    assert None not in values and server.items == 40
    # about 2,000 tokens at 1,000 a second, less the first burst: never faster
    assert elapsed >= (served_tokens - 600) / 1000, (elapsed, served_tokens)


def test_images_go_as_size_capped_image_parts(tmp_path: Path) -> None:
    path = tmp_path / "big.png"
    Image.new("RGB", (3000, 1500), (200, 10, 10)).save(path)
    with RewardModelServer() as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="vl-rm",
            input="messages",
            images=True,
            max_image_side=512,
        )(["A red square."], prompts=["What is shown?"], image_path=[str(path)])
    (body,) = server.bodies
    user = body["messages"][0]
    image_part, text_part = user["content"]
    assert text_part == {"type": "text", "text": "What is shown?"}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (512, 256)
    assert values == pytest.approx([expected_score(conversation_text(body["messages"]))])


def test_configuration_errors_are_named() -> None:
    with pytest.raises(ValueError, match="not both"):
        build_component(
            "reward_model", {"model": "/m", "endpoint": {"base_url": "http://h/v1", "model": "x"}}
        )
    with pytest.raises(ValueError, match="endpoint.api"):
        build_component("reward_model", {"base_url": "http://h/v1", "model": "x", "api": "score"})
    with pytest.raises(ValueError, match="images: true needs"):
        build_component("reward_model", {"base_url": "http://h/v1", "model": "x", "images": True})
    with pytest.raises(ValueError, match="label_token_ids"):
        build_component(
            "reward_model", {"base_url": "http://h/v1", "model": "x", "api": "generative_scoring"}
        )
    component = build_component("reward_model", {"base_url": "http://h/v1", "model": "x"})
    assert component.lanes() == frozenset({JUDGE_LANE})


@pytest.mark.parametrize("old_route", ["/v1/classify", "/generative-scores"])
def test_the_old_routes_are_not_served(old_route: str) -> None:
    # what the client posted before vLLM's routes were read from vLLM: every row masked
    fields = {"label_token_ids": [1, 2], "api": "generative_scoring"} if "gen" in old_route else {}
    with RewardModelServer() as server:
        values = make_reward(
            "reward_model", base_url=server.base_url, model="rm-old", path=old_route, **fields
        )(["a"], prompts=["q"])
    assert values == [None] and server.refused >= 1 and server.requests == 0


def test_a_base_url_with_v1_is_the_server_root(caplog: pytest.LogCaptureFixture) -> None:
    prompts, completions = rows(3)
    with RewardModelServer() as server, caplog.at_level("INFO"):
        values = make_reward(
            "reward_model", base_url=server.base_url + "/v1/", model="rm-v1", batch_size=1
        )(completions, prompts=prompts)
    expected = [expected_score(plain_text(p, c)) for p, c in zip(prompts, completions, strict=True)]
    assert values == pytest.approx(expected, abs=1e-9)
    assert server.paths == ["/classify"] * 3 and server.refused == 0
    notes = [r.getMessage() for r in caplog.records if "server root" in r.getMessage()]
    assert len(notes) == 1 and server.base_url in notes[0]  # once, naming the root


def test_a_one_label_model_on_vllm_classify_is_its_sigmoid_or_logit() -> None:
    prompts, completions = rows(4)
    texts = [plain_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    with RewardModelServer(num_labels=1) as server:
        probs = make_reward("reward_model", base_url=server.base_url, model="rm1")(
            completions, prompts=prompts
        )
        logits = make_reward(
            "reward_model", base_url=server.base_url, model="rm1", use_activation=False
        )(completions, prompts=prompts)
    raw = [expected_logits(t, 1)[0] for t in texts]
    assert logits == pytest.approx(raw, abs=1e-9)
    assert probs == pytest.approx([1 / (1 + math.exp(-x)) for x in raw], abs=1e-9)


def test_sglang_embeddings_give_the_raw_score() -> None:
    prompts, completions = rows(5)
    texts = [plain_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    with RewardModelServer(server="sglang", num_labels=1) as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="rm-sglang",
            server="sglang",
            api="embeddings",
            batch_size=8,
        )(completions, prompts=prompts)
    assert values == pytest.approx([expected_logits(t, 1)[0] for t in texts], abs=1e-9)
    assert server.paths == ["/v1/embeddings"] and server.refused == 0
    assert set(server.bodies[0]) == {"model", "input"}  # nothing SGLang does not take


def test_sglang_classify_of_a_one_label_model_is_refused_at_start() -> None:
    # what it would give: SGLang's /v1/classify softmaxes one logit, 1.0 for every input
    with RewardModelServer(server="sglang", num_labels=1) as server:
        import httpx

        reply = httpx.post(server.base_url + "/v1/classify", json={"model": "m", "input": ["a"]})
    assert reply.json()["data"][0]["probs"] == [1.0]
    with pytest.raises(ValueError, match=r"exactly 1\.0.*api: embeddings"):
        build_component(
            "reward_model", {"base_url": "http://h:30000", "model": "x", "server": "sglang"}
        )
    with pytest.raises(ValueError, match="use_activation: SGLang"):
        build_component(
            "reward_model",
            {
                "base_url": "http://h:30000",
                "model": "x",
                "server": "sglang",
                "api": "embeddings",
                "use_activation": False,
            },
        )
    with pytest.raises(ValueError, match="sglang serves"):
        build_component(
            "reward_model",
            {"base_url": "http://h:30000", "model": "x", "server": "sglang", "api": "pooling"},
        )


def test_sglang_classify_of_a_two_label_classifier_reads_its_label() -> None:
    prompts, completions = rows(4)
    texts = [plain_text(p, c) for p, c in zip(prompts, completions, strict=True)]
    with RewardModelServer(server="sglang") as server:
        values = make_reward(
            "reward_model",
            base_url=server.base_url,
            model="clf",
            server="sglang",
            labels=["bad", "good"],
            label="good",
        )(completions, prompts=prompts)
    assert values == pytest.approx([expected_score(t) for t in texts], abs=1e-9)
    assert server.paths == ["/v1/classify"] and server.refused == 0


def test_the_old_generative_scores_shape_is_a_bad_response() -> None:
    # the one development commit's reply (results[].token_probs) is no vLLM release's
    old = '{"results": [{"index": 0, "token_probs": {"1": 0.9, "2": 0.1}}]}'
    with RewardModelServer(plan=lambda n, body: Response(text=old)) as server:
        component = _served(server, api="generative_scoring", label_token_ids=[1, 2])
        request = component.lane_request({"prompt": "1 + 1?", "completion": "2"})
        (outcome,) = run_requests([request], component.endpoints())
    assert outcome.failure == "bad_response" and "no data list" in outcome.message
    assert server.paths == ["/generative_scoring"]
