"""Prompt tokens of a chat request, counted before it is sent, for a tokens-per-minute limit.

A :class:`TokenCounter` counts with the first of these it has:

1. ``tokenizer: PATH``: the judge model's own tokenizer from a local folder
   (its chat template applied, as the server does);
2. ``tokenizer: null`` (the default): the endpoint's ``POST /tokenize``, where
   vLLM serves it (at the server root, beside ``/v1``; request ``{"model",
   "messages", "add_generation_prompt"}``, answer ``{"count", ...}``). Until
   it has answered once, one request asks and the others wait for that answer
   (at most ``timeout_s``). An endpoint that does not serve it (404, 405, 501,
   or an answer without ``count``) is not asked again; any other failure
   counts that one request by bytes;
3. ``tokenizer: bytes``, or the fallback: the UTF-8 bytes of the text plus
   :data:`MESSAGE_OVERHEAD_TOKENS` per message. A token of a byte-level BPE
   (GPT-2, Llama 3, Qwen) or of a SentencePiece model with byte fallback covers
   at least one byte, so this never counts fewer tokens than the model does, in
   any script; it counts English about 4 times over, CJK about 1.5 to 3 times.

Image parts count :data:`IMAGE_TOKENS_ESTIMATE` each, whatever the mode (the
tokenizer does not see them). The client corrects every count from the
reply's ``usage`` once it comes, so an over-count only delays the next calls
until then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from skyrl_rewards.rewards.models.endpoint_hold import server_root

IMAGE_TOKENS_ESTIMATE = 1024
"""Tokens counted for one image part before the reply's ``usage`` tells the real number."""

MESSAGE_OVERHEAD_TOKENS = 8
"""Tokens a chat template adds per message (role markers, separators), bytes mode."""

BYTES = "bytes"
"""The ``tokenizer`` value that counts by bytes without asking the endpoint."""

_NOT_SERVED = (404, 405, 501)


def _split(messages: Any) -> tuple[list[dict[str, str]], int]:
    """``(text-only messages, image parts)``: each content flattened to its text parts."""
    texts: list[dict[str, str]] = []
    images = 0
    for message in messages if isinstance(messages, Sequence) else ():
        if not isinstance(message, Mapping):
            continue
        content = message.get("content")
        if isinstance(content, list):
            parts = [p for p in content if isinstance(p, Mapping)]
            images += sum(p.get("type") == "image_url" for p in parts)
            content = "".join(str(p.get("text", "")) for p in parts if p.get("type") == "text")
        texts.append({"role": str(message.get("role", "user")), "content": str(content or "")})
    return texts, images


def byte_count(messages: Any) -> int:
    """Prompt tokens by bytes: never fewer than a byte-level tokenizer gives (see the module docstring).

    >>> byte_count([{"role": "user", "content": "日本"}])  # 6 bytes and one message
    14
    """
    texts, images = _split(messages)
    return (
        sum(len(m["content"].encode("utf-8")) + MESSAGE_OVERHEAD_TOKENS for m in texts)
        + images * IMAGE_TOKENS_ESTIMATE
    )


class TokenCounter:
    """Counts a request's prompt tokens for one endpoint (see the module docstring).

    ``tokenizer``: a local folder, ``"bytes"``, or ``None`` (the endpoint's
    ``/tokenize`` when it serves it). A folder that holds no tokenizer raises
    ``ValueError`` here, naming it.
    """

    def __init__(self, tokenizer: str | None, base_url: str, model: str, timeout_s: float) -> None:
        self._model = model
        self._timeout_s = timeout_s
        self._local: Any = None
        self._tokenize_url: str | None = None
        self._tokenize_known = False  # /tokenize has answered with a count once
        self._first_ask: asyncio.Future[None] | None = None
        if tokenizer is None:
            self._tokenize_url = server_root(base_url) + "/tokenize"
        elif tokenizer != BYTES:
            from skyrl_rewards.rewards.contract.hub import load_pretrained_tokenizer

            self._local = load_pretrained_tokenizer(tokenizer)
        self.counted: dict[str, int] = {"tokenizer": 0, "endpoint": 0, "bytes": 0}
        """Requests counted by each means."""

    @property
    def local_tokenizer(self) -> Any:
        """The tokenizer loaded from the ``tokenizer`` folder (``None`` when counting otherwise)."""
        return self._local

    async def count(self, messages: Any, http: Any) -> int:
        """Prompt tokens of ``messages``; ``http`` (an ``httpx.AsyncClient``) asks ``/tokenize``."""
        texts, images = _split(messages)
        extra = images * IMAGE_TOKENS_ESTIMATE
        if self._local is not None:
            self.counted["tokenizer"] += 1
            return self._local_count(texts) + extra
        if self._tokenize_url is not None and not self._tokenize_known:
            if self._first_ask is not None:  # another request is finding out: wait for it
                await asyncio.wait({self._first_ask}, timeout=self._timeout_s)
            else:
                self._first_ask = asyncio.get_running_loop().create_future()
                try:
                    served = await self._endpoint_count(texts, http)
                finally:
                    self._first_ask.set_result(None)
                    self._first_ask = None
                self._tokenize_known = served is not None
                if served is not None:
                    self.counted["endpoint"] += 1
                    return served + extra
        if self._tokenize_url is not None and self._tokenize_known:
            served = await self._endpoint_count(texts, http)
            if served is not None:
                self.counted["endpoint"] += 1
                return served + extra
        self.counted["bytes"] += 1
        return byte_count(messages)

    def _local_count(self, texts: list[dict[str, str]]) -> int:
        tokenizer = self._local
        if getattr(tokenizer, "chat_template", None):
            text = tokenizer.apply_chat_template(texts, tokenize=False, add_generation_prompt=True)
            return len(tokenizer(text, add_special_tokens=False)["input_ids"])
        return sum(
            len(tokenizer(m["content"], add_special_tokens=False)["input_ids"])
            + MESSAGE_OVERHEAD_TOKENS
            for m in texts
        )

    async def _endpoint_count(self, texts: list[dict[str, str]], http: Any) -> int | None:
        """The endpoint's count; ``None`` (and no more asking when it does not serve it) otherwise."""
        import httpx

        body = {"model": self._model, "messages": texts, "add_generation_prompt": True}
        try:
            response = await http.post(self._tokenize_url, json=body, timeout=self._timeout_s)
        except httpx.HTTPError:
            return None
        if response.status_code in _NOT_SERVED:
            self._tokenize_url = None
            return None
        if response.status_code != 200:
            return None
        try:
            count = response.json().get("count")
        except (ValueError, AttributeError):
            count = None
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            self._tokenize_url = None
            return None
        return count
