"""A served reward model on loopback, speaking vLLM's pooling endpoints, for tests and benchmarks.

Usage (the stable API other tests build on)::

    with RewardModelServer(latency_s=0.05, max_concurrent=4) as server:
        config = {"base_url": server.base_url, "model": MODEL, "api": "classify"}
        ...
        assert server.items == 8 and server.peak <= 4

The shapes are vLLM's, as its protocol modules define them (read in
``vllm/entrypoints/pooling/classify/protocol.py``,
``vllm/entrypoints/pooling/pooling/protocol.py`` and
``vllm/entrypoints/openai/generative_scores/protocol.py`` of vllm-project/vllm):

- ``POST /v1/classify``: ``{"model", "input": str | [str]}`` or
  ``{"model", "messages": [...]}`` (one conversation), extras
  ``use_activation`` (default true), ``truncate_prompt_tokens``, ``priority``,
  ``mm_processor_kwargs`` -> ``{"id", "object": "list", "created", "model",
  "data": [{"index", "label", "probs", "num_classes"}], "usage"}``. With
  ``use_activation: false`` ``probs`` holds the raw logits.
- ``POST /v1/pooling``: the same inputs -> ``data: [{"index", "object":
  "pooling", "data": [floats]}]`` (the raw logits).
- ``POST /v1/generative-scores`` (also answered at ``/v1/generative_scoring``):
  ``{"model", "query", "items": [str], "label_token_ids": [int, ...],
  "apply_softmax", "item_first"}`` -> ``{"id", "object": "generative_score",
  "created", "model", "results": [{"index", "token_probs": {"<id>": p}}],
  "usage"}``. The text scored is ``query + item`` (``item + query`` with
  ``item_first``); the first label id is scored as "yes" (label 1), every
  other id as "no" (label 0), softmax over the labels.

Values are a deterministic function of the input text, exported so tests
check them: :func:`expected_logits` (two logits, ``[-x, x]``),
:func:`expected_probs` and :func:`expected_score` (``P(LABEL_1)``). A
``messages`` input is scored as :func:`conversation_text` of its messages
(image parts count as ``"<image>"``).

Behaviour is :class:`loopback_server.ScriptedServer`'s, set per test and
changeable while the server runs: ``latency_s`` (per HTTP request, whatever
its item count: a batching server), ``max_concurrent`` (requests served at once; more wait), ``plan(n, body) ->
Response | None`` (an answer other than the values for the n-th call:
a 429 with ``Retry-After``, a 500/503, a delay, ``drop``), ``down`` (every
call is dropped: an outage), ``accept_at_once`` (one more request than this in
flight is answered 429 with ``Retry-After: retry_after`` at once) and
``text`` (a planned ``Response.text`` replaces the body: a bad shape).

It counts what reached it: ``requests`` (HTTP calls to a scoring route),
``items`` (inputs in them), ``peak`` (the most in flight, counted on arrival),
``throttled`` (429 answers), ``errors`` (planned 5xx answers), ``dropped``
(connections closed unanswered), ``bodies`` and ``paths``.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from typing import Any

from loopback_server import Response, ScriptedHandler, ScriptedServer

__all__ = [
    "LABELS",
    "MODEL",
    "Response",
    "RewardModelServer",
    "conversation_text",
    "expected_logits",
    "expected_probs",
    "expected_score",
]

MODEL = "loopback-reward-model"
"""The model name the server reports (it accepts any)."""

LABELS = ("LABEL_0", "LABEL_1")
"""The classifier's labels, index order (``probs[i]`` is ``LABELS[i]``)."""


def expected_logits(text: str) -> list[float]:
    """The server's logits for ``text``: ``[-x, x]``, ``x`` in ``[-4, 4)`` from blake2b of the text.

    >>> a = expected_logits("hello")
    >>> a == expected_logits("hello") and a[0] == -a[1] and -4 <= a[1] < 4
    True
    """
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    x = int.from_bytes(digest, "big") / 2**32 * 8.0 - 4.0
    return [-x, x]


def expected_probs(text: str) -> list[float]:
    """Softmax of :func:`expected_logits`: ``[P(LABEL_0), P(LABEL_1)]``."""
    logits = expected_logits(text)
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    return [e / sum(exps) for e in exps]


def expected_score(text: str) -> float:
    """``P(LABEL_1)`` for ``text``: classify's ``probs[1]``, generative scoring's P(yes)."""
    return expected_probs(text)[1]


def conversation_text(messages: list[dict[str, Any]]) -> str:
    """The text the server scores for a chat: ``"role: content"`` lines, image parts as ``<image>``."""
    lines = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(
                part.get("text", "") if part.get("type") == "text" else "<image>"
                for part in content
            )
        lines.append(f"{message.get('role')}: {content}")
    return "\n".join(lines)


class RewardModelServer(ScriptedServer):
    """See the module docstring. Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT/v1``."""

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        max_concurrent: int | None = None,
        plan: Callable[[int, dict[str, Any]], Response | None] | None = None,
        accept_at_once: int | None = None,
        retry_after: str = "1",
    ) -> None:
        super().__init__(
            self._handler_class(),
            latency_s=latency_s,
            max_concurrent=max_concurrent,
            plan=plan,
            accept_at_once=accept_at_once,
            retry_after=retry_after,
        )
        self.requests = 0
        self.items = 0
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []

    @property
    def base_url(self) -> str:
        """The base URL, ``http://127.0.0.1:PORT/v1`` (also ``url``)."""
        return self.url

    def _handler_class(self) -> type[ScriptedHandler]:
        server = self

        class Handler(ScriptedHandler):
            owner = server

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.read_json()
                route = self.path.rstrip("/").rsplit("/", 1)[-1]
                if route not in ("classify", "pooling", "generative-scores", "generative_scoring"):
                    self.send(404, {"detail": "Not Found"})
                    return
                texts = _texts(route, body)
                with server._lock:
                    server.requests += 1
                    number = server.requests
                    server.items += len(texts)
                    server.bodies.append(body)
                    server.paths.append(self.path)
                with server.in_flight():
                    turn = self.take_turn(number, body)
                    if turn is None:
                        return
                    if turn.planned is not None and turn.planned.text is not None:
                        self._send_raw(turn.planned.text)
                    else:
                        self.send(200, _reply(route, body, texts))

            def _send_raw(self, text: str) -> None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def _texts(route: str, body: dict[str, Any]) -> list[str]:
    """The texts a request scores, in order."""
    if route in ("generative-scores", "generative_scoring"):
        query, items = body.get("query", ""), body.get("items") or []
        return [item + query if body.get("item_first") else query + item for item in items]
    if "messages" in body:
        return [conversation_text(body["messages"])]
    value = body.get("input", [])
    return [value] if isinstance(value, str) else list(value)


def _usage(texts: list[str]) -> dict[str, Any]:
    tokens = sum(max(1, len(text) // 4) for text in texts)
    return {"prompt_tokens": tokens, "total_tokens": tokens, "completion_tokens": 0}


def _reply(route: str, body: dict[str, Any], texts: list[str]) -> dict[str, Any]:
    created = int(time.time())
    model = body.get("model") or MODEL
    if route in ("generative-scores", "generative_scoring"):
        ids = [str(i) for i in body.get("label_token_ids", [])]
        results = []
        for index, text in enumerate(texts):
            p_no, p_yes = expected_probs(text)
            probs = {ids[0]: p_yes} if ids else {}
            probs.update({i: p_no / max(1, len(ids) - 1) for i in ids[1:]})
            results.append({"index": index, "token_probs": probs})
        return {
            "id": "genscore-1",
            "object": "generative_score",
            "created": created,
            "model": model,
            "results": results,
            "usage": _usage(texts),
        }
    if route == "pooling":
        data: list[dict[str, Any]] = [
            {"index": index, "object": "pooling", "data": expected_logits(text)}
            for index, text in enumerate(texts)
        ]
    else:
        activate = body.get("use_activation", True) is not False
        data = []
        for index, text in enumerate(texts):
            probs = expected_probs(text) if activate else expected_logits(text)
            label = LABELS[max(range(len(probs)), key=probs.__getitem__)]
            data.append({"index": index, "label": label, "probs": probs, "num_classes": 2})
    return {
        "id": f"{route}-1",
        "object": "list",
        "created": created,
        "model": model,
        "data": data,
        "usage": _usage(texts),
    }
