"""The judge client's limits measured where they matter, at the loopback server.

Tokens per minute, counted by the server with the judge model's tokenizer (a
real byte-level BPE built here), for English, CJK and code prompts, whichever
way the client counts (that tokenizer, the server's ``/tokenize``, bytes);
adaptive concurrency against a server that takes 8 requests at a time and
answers 429 beyond.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from judge_server import JudgeServer, complete_all
from judge_texts import SCRIPTS, load_tokenizer, messages, save_tokenizer, text, tokens_endpoint

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, ModelRequest
from skyrl_rewards.rewards.models.judge_client import EndpointConfig
from skyrl_rewards.rewards.models.token_count import byte_count

TOKENS_PER_MINUTE = 120_000.0  # 2,000 a second: a few seconds per case
TOKENS_PER_CASE = 8_000


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tokenizer(tmp_path_factory.mktemp("judge_tokenizer"))


def request(chat: list[dict[str, Any]]) -> ModelRequest:
    return ModelRequest(JUDGE_LANE, "e", {"messages": chat})


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize(
    "counting",
    [
        "tokenizer",  # the client holds the model's tokenizer (a local folder)
        "endpoint",  # the client asks the server's /tokenize (vLLM's)
        "bytes",  # neither: UTF-8 bytes, corrected from each reply's usage
    ],
)
def test_tokens_per_minute_held_within_5_percent_at_the_server(
    script: str, counting: str, tokenizer_dir: Path
) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    with JudgeServer(tokenizer=tokenizer) as server:
        count = max(20, TOKENS_PER_CASE // server.prompt_tokens(messages(script, 300, 0)))
        chats = [messages(script, 300, seed) for seed in range(count)]
        cfg = EndpointConfig.from_mapping(
            tokens_endpoint(server.url, "judge", TOKENS_PER_MINUTE, counting, tokenizer_dir)
        )
        outcomes, metrics = complete_all(cfg, [request(chat) for chat in chats])
        rate = server.tokens_per_minute(skip=2)  # past the first call (the allowed burst)
    assert all(o.ok for o in outcomes) and server.calls == count
    assert metrics["token_count"][counting] == count  # counted the way this case means
    assert server.tokenize_calls == (count if counting == "endpoint" else 0)
    assert abs(rate - TOKENS_PER_MINUTE) / TOKENS_PER_MINUTE <= 0.05, (script, counting, rate)


@pytest.mark.parametrize(
    "sample",
    [
        *(text(script, 300, 7) for script in SCRIPTS),
        "😀🎉 مرحبا بالعالم — Ünïcödé ß",  # scripts the tokenizer never saw: byte tokens
        "\u200b" * 40,  # zero-width spaces, three bytes each
        "",  # an empty message still has its template
    ],
)
def test_the_byte_estimate_never_counts_fewer_tokens_than_the_model(
    sample: str, tokenizer_dir: Path
) -> None:
    tokenizer = load_tokenizer(tokenizer_dir)
    chat = [{"role": "system", "content": "Grade."}, {"role": "user", "content": sample}]
    with JudgeServer(tokenizer=tokenizer) as server:
        assert byte_count(chat) >= server.prompt_tokens(chat)


def test_a_provider_without_tokenize_is_asked_once_then_counted_by_bytes() -> None:
    with JudgeServer() as server:  # no tokenizer: /tokenize is 404, as on a hosted API
        cfg = EndpointConfig.from_mapping(
            {"base_url": server.url, "model": "judge", "tokens_per_minute": 1e9}
        )
        outcomes, metrics = complete_all(
            cfg, [request(messages("english", 50, i)) for i in range(5)]
        )
    assert all(o.ok for o in outcomes)
    assert server.tokenize_calls == 1 and metrics["token_count"]["bytes"] == 5


def test_adaptive_concurrency_costs_few_retries_against_a_server_taking_8_at_a_time() -> None:
    items = 400
    with JudgeServer(latency_s=0.05, accept_at_once=8, retry_after="1") as server:
        cfg = EndpointConfig.from_mapping(
            {
                "base_url": server.url,
                "model": "judge",
                "limits": {"max_in_flight": 64},
                "retries": {"max_retries": 4},
            }
        )
        outcomes, metrics = complete_all(
            cfg, [request(messages("english", 40, i)) for i in range(items)]
        )
    assert server.throttled > 0  # the fault happened: the server refused calls beyond 8
    assert all(o.ok for o in outcomes)  # none masked
    assert server.calls <= 1.2 * items, server.calls  # requests per item, counted at the server
    assert metrics["throttled"] == server.throttled and metrics["in_flight_window"] <= 9
    assert server.peak <= 64
