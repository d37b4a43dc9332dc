"""Tokenizers by folder or hub name: a folder loads offline; an unreachable hub fails at once with the fix."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import pytest

from skyrl_rewards.rewards.batch import make_reward
from skyrl_rewards.rewards.contract.hub import load_pretrained_tokenizer, probe

NOT_CACHED = "skyrl-rewards-tests/no-such-tokenizer"  # a hub name no cache holds


def closed_loopback_url() -> str:
    """An http URL on 127.0.0.1 whose port nothing listens on (connect is refused at once)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_local_folder_loads_without_network(
    bpe_tokenizer: Any, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    bpe_tokenizer.save_pretrained(tmp_path)
    reward = make_reward("length", tokenizer=str(tmp_path))
    direct = make_reward("length", tokenizer=bpe_tokenizer)
    completions = ["<think>the answer is 42</think><answer>42</answer>"]
    assert reward(completions, solution=["<answer>42</answer>"]) == direct(
        completions, solution=["<answer>42</answer>"]
    )


def test_hub_switched_off_fails_at_once_with_the_fix(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.perf_counter()
    with pytest.raises(ValueError, match="hub is switched off") as caught:
        make_reward("length", tokenizer=NOT_CACHED)
    assert time.perf_counter() - start < 5.0
    assert "Pass a local folder" in str(caught.value) and "rewards.length" in str(caught.value)


def test_unreachable_hub_fails_at_once_with_the_fix(monkeypatch) -> None:
    # The realistic offline case: no variable set, the hub does not answer (here: a closed loopback port).
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", closed_loopback_url())
    start = time.perf_counter()
    with pytest.raises(ValueError, match="cannot be reached: ConnectionRefusedError") as caught:
        load_pretrained_tokenizer(NOT_CACHED)
    assert time.perf_counter() - start < 5.0  # transformers alone retried for about 50 s
    assert "tokenizer='DIR'" in str(caught.value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("./no/such/folder", "is not a folder"),  # a path that does not exist
        ("/tmp/a/b/c", "is not a folder"),
    ],
)
def test_paths_that_do_not_exist_are_named(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_pretrained_tokenizer(name)


def test_folder_without_a_tokenizer(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="cannot load the folder"):
        load_pretrained_tokenizer(str(tmp_path))


def test_probe_is_bounded_and_says_why() -> None:
    assert "ConnectionRefusedError" in (probe(closed_loopback_url(), 2.0) or "")
    with socket.socket() as server:  # a listening loopback socket accepts the connect
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        assert probe(f"http://127.0.0.1:{server.getsockname()[1]}", 2.0) is None
    assert probe("not a url", 1.0) == "'not a url' names no host"
