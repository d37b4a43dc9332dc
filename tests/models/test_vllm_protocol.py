"""The served reward model and the judge against vLLM's own protocol (vLLM 0.30, ``.venv-skyrl``).

The loopback servers answer through vLLM's own API routers, request classes
and response classes (``vllm_protocol.py``): a route vLLM does not serve is a
404, a body its request class refuses is a 400 (``server.refused`` counts
both), a reply is vLLM's response object as vLLM serializes it. Every API the
client speaks is driven through them, the pinned shapes the main venv's
servers use are checked against vLLM's (the reward model's equal, the judge's
chat and ``/tokenize`` fields vLLM's with its values), and their routes are
the POST routes of vLLM's own routers. ``tests/test_skyrl_trainer_py312.py``
runs this module in ``.venv-skyrl``; without vLLM it is skipped.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("vllm")

from judge_server import CHAT_ROUTE, JudgeServer, complete_all  # noqa: E402
from judge_texts import load_tokenizer, messages, save_tokenizer, tokens_endpoint  # noqa: E402
from PIL import Image  # noqa: E402
from reward_model_server import (  # noqa: E402
    VLLM_ROUTES,
    RewardModelServer,
    conversation_text,
    expected_logits,
    expected_score,
    templated_texts,
)
from vllm_protocol import VLLM_VERSION  # noqa: E402

from skyrl_rewards.rewards.batch import make_reward  # noqa: E402
from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest  # noqa: E402
from skyrl_rewards.rewards.models.judge_client import EndpointConfig  # noqa: E402


@pytest.fixture(scope="module")
def server() -> Any:
    """One vLLM-protocol reward model server for the module (vLLM's entrypoints import once)."""
    with RewardModelServer() as served:
        assert served.protocol == f"vllm {VLLM_VERSION}"
        yield served


def rows(count: int) -> tuple[list[str], list[str]]:
    return [f"What is {i} + {i}?" for i in range(count)], [f"It is {2 * i}." for i in range(count)]


def texts(prompts: list[str], completions: list[str]) -> list[str]:
    return [f"{p}\n{c}" for p, c in zip(prompts, completions, strict=True)]


def test_vllm_is_the_pinned_version() -> None:
    assert VLLM_VERSION is not None and VLLM_VERSION.startswith("0.30")


def test_classify_text_batches_with_a_chat_template(server: Any, tmp_path: Path) -> None:
    folder = save_tokenizer(tmp_path / "tok")
    prompts, completions = rows(6)
    refused = server.refused
    values = make_reward(
        "reward_model",
        base_url=server.base_url,
        model="rm",
        tokenizer=str(folder),
        batch_size=3,
        batch_wait_s=0.05,
    )(completions, prompts=prompts)
    tokenizer = load_tokenizer(folder)
    rendered = templated_texts(tokenizer, prompts, completions)
    assert values == pytest.approx([expected_score(t) for t in rendered], abs=1e-9)
    assert server.refused == refused  # vLLM's ClassificationCompletionRequest took every body
    assert server.bodies[-1]["add_special_tokens"] is False


def test_classify_raw_logits_pooling_and_generative_scoring(server: Any) -> None:
    prompts, completions = rows(4)
    scored = texts(prompts, completions)
    refused = server.refused
    common = {"base_url": server.base_url + "/v1", "model": "rm"}  # one block for judge and RM
    logits = make_reward("reward_model", **common, use_activation=False)(
        completions, prompts=prompts
    )
    pooled = make_reward("reward_model", **common, api="pooling", index=1)(
        completions, prompts=prompts
    )
    generative = make_reward(
        "reward_model",
        **common,
        api="generative_scoring",
        query="Correct? ",
        label_token_ids=[9454, 2753],
    )(completions, prompts=prompts)
    assert logits == pytest.approx([expected_logits(t)[1] for t in scored], abs=1e-9)
    assert pooled == pytest.approx([expected_logits(t)[1] for t in scored], abs=1e-9)
    assert generative == pytest.approx([expected_score("Correct? " + t) for t in scored], abs=1e-9)
    assert server.refused == refused
    assert {"/classify", "/pooling", "/generative_scoring"} <= set(server.paths)


def test_messages_with_images_and_vllm_extras(server: Any, tmp_path: Path) -> None:
    path = tmp_path / "red.png"
    Image.new("RGB", (64, 32), (200, 10, 10)).save(path)
    refused = server.refused
    values = make_reward(
        "reward_model",
        base_url=server.base_url,
        model="vl-rm",
        input="messages",
        images=True,
        truncate_prompt_tokens=512,
        priority=0,
        mm_processor_kwargs={"max_pixels": 4096},
    )(["A red square."], prompts=["What is shown?"], image_path=[str(path)])
    body = server.bodies[-1]
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (64, 32)
    assert values == pytest.approx([expected_score(conversation_text(body["messages"]))])
    assert server.refused == refused  # vLLM's ClassificationChatRequest took it


@pytest.mark.parametrize("old_route", ["/v1/classify", "/v1/pooling", "/generative-scores"])
def test_vllm_does_not_serve_the_old_routes(server: Any, old_route: str) -> None:
    extra = {"api": "generative_scoring", "label_token_ids": [1, 2]} if "gen" in old_route else {}
    refused = server.refused
    values = make_reward(
        "reward_model", base_url=server.base_url, model="rm", path=old_route, **extra
    )(["a"], prompts=["q"])
    assert values == [None] and server.refused == refused + 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/classify", {"model": "m", "input": ["one", "two"]}),
        ("/classify", {"model": "m", "input": "one", "use_activation": False}),
        ("/classify", {"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        ("/pooling", {"model": "m", "input": ["one"]}),
        (
            "/generative_scoring",
            {"model": "m", "query": "q ", "items": ["a", "b"], "label_token_ids": [5, 6]},
        ),
        ("/classify", {"model": "m"}),  # no input: 400 both
        ("/classify", {"model": "m", "input": ["a"], "normalize": True}),  # removed: 400
        ("/generative_scoring", {"model": "m", "query": "q", "items": ["a"]}),  # no label ids
    ],
)
def test_the_pinned_shapes_are_vllms(server: Any, path: str, body: dict[str, Any]) -> None:
    assert server.vllm is not None
    status, reply = server.vllm.post(path, body)
    pinned_status, pinned = server._pinned(path, body)
    assert status == pinned_status
    if status != 200:
        assert set(reply) == set(pinned) == {"error"}
        return
    for key in ("id", "created"):
        assert type(reply.pop(key)) is type(pinned.pop(key))
    usage, pinned_usage = reply.pop("usage"), pinned.pop("usage")
    assert {k: v for k, v in usage.items() if v is not None} == {
        k: v for k, v in pinned_usage.items() if v is not None
    }
    assert reply == pinned


def test_the_loopback_routes_are_vllms(server: Any) -> None:
    # the routes vLLM's own routers answer POST on, mounted as `vllm serve` mounts them
    assert server.vllm.post_routes == set(VLLM_ROUTES)
    with JudgeServer() as judge:
        assert {CHAT_ROUTE, "/tokenize"} <= judge.vllm.post_routes


def within(pinned: Any, reply: Any) -> bool:
    """Every field of ``pinned`` is in ``reply`` with the same value (``reply`` may have more)."""
    if isinstance(pinned, dict):
        return isinstance(reply, dict) and all(
            key in reply and within(value, reply[key]) for key, value in pinned.items()
        )
    if isinstance(pinned, list):
        return (
            isinstance(reply, list)
            and len(pinned) == len(reply)
            and all(within(a, b) for a, b in zip(pinned, reply, strict=True))
        )
    return pinned == reply


def test_the_judge_servers_pinned_shapes_are_vllms(tmp_path: Path) -> None:
    # the main venv's judge server answers chat and /tokenize in these pinned shapes: each is
    # the fields of vLLM's reply to the body the client sent, with vLLM's values
    folder = save_tokenizer(tmp_path / "tok")
    chat = messages("english", 40, 0)
    with JudgeServer(tokenizer=load_tokenizer(folder), reply=lambda body: "0.75") as judge:
        config = EndpointConfig.from_mapping({"base_url": judge.url, "model": "judge"})
        (outcome,), _ = complete_all(config, [ModelRequest(JUDGE_LANE, "e", {"messages": chat})])
        body, served = judge.bodies[-1], judge.served[-1]
        reply = httpx.post(judge.url + "/chat/completions", json=body).json()
        tokenize = {"model": "judge", "messages": chat, "add_generation_prompt": True}
        counted = httpx.post(judge.url.removesuffix("/v1") + "/tokenize", json=tokenize).json()
        pinned_count = judge.pinned_tokenize(tokenize)
        refused = judge.refused
    assert outcome.text == "0.75" and refused == 0
    pinned = judge.pinned_chat(1, body, "0.75", served.prompt_tokens, served.completion_tokens)
    for key in ("id", "created"):
        assert type(reply.pop(key)) is type(pinned.pop(key))
    assert within(pinned, reply), (pinned, reply)
    assert within(pinned_count, counted), (pinned_count, counted)


def test_a_judge_through_vllms_chat_and_tokenize(tmp_path: Path) -> None:
    folder = save_tokenizer(tmp_path / "tok")
    with JudgeServer(tokenizer=load_tokenizer(folder), reply=lambda body: "0.75") as judge:
        assert judge.protocol == f"vllm {VLLM_VERSION}"
        config = EndpointConfig.from_mapping(
            tokens_endpoint(judge.url, "judge", 6_000_000, "endpoint", folder)
        )
        chats = [messages("english", 40, seed) for seed in range(6)]
        outcomes, metrics = complete_all(
            config, [ModelRequest(JUDGE_LANE, "e", {"messages": chat}) for chat in chats]
        )
        refused = judge.refused
    assert [o.text for o in outcomes] == ["0.75"] * 6
    assert refused == 0  # vLLM's ChatCompletionRequest and TokenizeChatRequest took every body
    assert metrics["token_count"]["endpoint"] == 6 and judge.tokenize_calls == 6
    assert metrics["tokens_in"] == sum(s.prompt_tokens for s in judge.served)


def test_a_judge_base_url_without_v1_is_a_404() -> None:
    with JudgeServer() as judge:
        config = EndpointConfig.from_mapping(
            {
                "base_url": judge.url.removesuffix("/v1"),
                "model": "judge",
                "retries": {"max_retries": 0},
            }
        )
        (outcome,), _ = complete_all(
            config,
            [ModelRequest(JUDGE_LANE, "e", {"messages": [{"role": "user", "content": "q"}]})],
        )
        refused = judge.refused
    assert outcome.failure == "http_status" and "404" in outcome.message and refused == 1
    assert math.isfinite(outcome.latency_s)
