"""A served reward model on loopback, speaking vLLM's (or SGLang's) protocol, for tests and benchmarks.

Usage (the stable API other tests build on)::

    with RewardModelServer(latency_s=0.05, max_concurrent=4) as server:
        config = {"base_url": server.base_url, "model": MODEL, "api": "classify"}
        ...
        assert server.items == 8 and server.peak <= 4

``server="vllm"`` (the default) serves vLLM 0.30's routes at the server root,
as ``vllm serve`` mounts them (``base_url`` is ``http://127.0.0.1:PORT``):

- ``POST /classify``: ``{"model", "input": str | [str]}`` or ``{"model",
  "messages": [...]}``, with ``use_activation``, ``truncate_prompt_tokens``,
  ``priority``, ``mm_processor_kwargs``, ``add_special_tokens`` -> ``{"id",
  "object": "list", "created", "model", "data": [{"index", "label", "probs",
  "num_classes"}], "usage"}``. ``probs`` is the softmax of the logits (the
  sigmoid of a one-label model's), or the raw logits with ``use_activation: false``.
- ``POST /pooling``: the same inputs -> ``data: [{"index", "object":
  "pooling", "data": [floats]}]`` (the raw logits).
- ``POST /generative_scoring``: ``{"model", "query", "items": [str],
  "label_token_ids": [int, ...], "apply_softmax", "item_first"}`` ->
  ``{"data": [{"index", "object": "score", "score"}], "usage"}``: the text
  scored is ``query + item`` (``item + query`` with ``item_first``), the first
  label id's probability normalised over the label ids (P(LABEL_1) of
  :func:`expected_probs`).

Where vLLM is installed (``.venv-skyrl``) these are vLLM's own routers,
request classes and response classes (:mod:`vllm_protocol`): a request vLLM
would refuse is its 400, any other route a 404, and every reply is vLLM's
response object serialized as vLLM does. Without it (the main venv) the same
routes answer in the same shapes, pinned, with the same 404s;
``test_vllm_protocol.py`` checks the two agree.

``server="sglang"`` serves SGLang's (0.5.23) OpenAI-compatible routes, pinned
to its source (``sglang/srt/entrypoints/openai/protocol.py``,
``serving_embedding.py``, ``serving_classify.py``; sglang cannot be a
dependency beside vLLM 0.30; ``test_sglang_protocol.py`` checks them against
SGLang's own classes where its protocol module imports): ``POST
/v1/embeddings`` ``{"model", "input"}`` -> ``{"data": [{"embedding":
[logits], "index", "object": "embedding"}], "model", "object": "list",
"usage"}`` (a reward model's raw scores) and
``POST /v1/classify`` ``{"model", "input"}`` -> vLLM's classify shape with
``probs`` always a softmax (``use_activation`` ignored: a one-label model's
``probs`` is ``[1.0]``). A body without ``input`` is a 400.

Values are a deterministic function of the input text, exported so tests
check them: :func:`expected_logits` (``num_labels`` logits: ``[-x, x]``, or
``[x]``), :func:`expected_probs` and :func:`expected_score` (``P(LABEL_1)``). A
``messages`` input is scored as :func:`conversation_text` of its messages
(image parts count as ``"<image>"``).

Behaviour is :class:`loopback_server.ScriptedServer`'s, set per test and
changeable while the server runs: ``latency_s`` (per HTTP request, whatever
its item count: a batching server), ``max_concurrent`` (requests served at
once; more wait), ``plan(n, body) -> Response | None`` (an answer other than
the values for the n-th call: a 429 with ``Retry-After``, a 500/503, a delay,
``drop``), ``down`` (every call is dropped: an outage), ``accept_at_once``
(one more request than this in flight is answered 429 with ``Retry-After:
retry_after`` at once) and ``text`` (a planned ``Response.text`` replaces the
body: a bad shape).

It counts what reached it: ``requests`` (HTTP calls to a scoring route),
``items`` (inputs in them), ``peak`` (the most in flight, counted on arrival),
``throttled`` (429 answers), ``errors`` (planned 5xx answers), ``dropped``
(connections closed unanswered), ``refused`` (4xx answers of the protocol:
an unknown route, a body the server's request class refuses), ``bodies``,
``paths`` and ``served`` (arrival and status of every call).
"""

from __future__ import annotations

import hashlib
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

from loopback_server import Response, ScriptedHandler, ScriptedServer, Turn
from vllm_protocol import VLLM_VERSION, Answer, VllmApp, protocol

__all__ = [
    "LABELS",
    "MODEL",
    "Response",
    "RewardModelServer",
    "conversation_text",
    "expected_logits",
    "expected_probs",
    "expected_score",
    "templated_texts",
]

MODEL = "loopback-reward-model"
"""The model name the server reports (it accepts any)."""

LABELS = ("LABEL_0", "LABEL_1")
"""The classifier's labels, index order (``probs[i]`` is ``LABELS[i]``)."""

VLLM_ROUTES = ("/classify", "/pooling", "/generative_scoring")
"""The scoring routes ``server="vllm"`` serves (at the root, as vLLM mounts them)."""

SGLANG_ROUTES = ("/v1/embeddings", "/v1/classify")
"""The scoring routes ``server="sglang"`` serves."""


def expected_logits(text: str, num_labels: int = 2) -> list[float]:
    """The server's logits for ``text``: ``[-x, x]`` (``[x]`` with one label), ``x`` in ``[-4, 4)``.

    >>> a = expected_logits("hello")
    >>> a == expected_logits("hello") and a[0] == -a[1] and -4 <= a[1] < 4
    True
    """
    digest = hashlib.blake2b(text.encode(), digest_size=4).digest()
    x = int.from_bytes(digest, "big") / 2**32 * 8.0 - 4.0
    return [x] if num_labels == 1 else [-x, x]


def expected_probs(text: str) -> list[float]:
    """Softmax of :func:`expected_logits`: ``[P(LABEL_0), P(LABEL_1)]``."""
    return _softmax(expected_logits(text))


def expected_score(text: str) -> float:
    """``P(LABEL_1)`` for ``text``: classify's ``probs[1]``, generative scoring's P(yes)."""
    return expected_probs(text)[1]


def _softmax(logits: list[float]) -> list[float]:
    top = max(logits)
    exps = [math.exp(v - top) for v in logits]
    return [e / sum(exps) for e in exps]


def templated_texts(tokenizer: Any, prompts: list[str], completions: list[str]) -> list[str]:
    """Each row's text input as a chat template renders it (the prompt, then the completion)."""
    return [
        tokenizer.apply_chat_template(
            [{"role": "user", "content": p}, {"role": "assistant", "content": c}], tokenize=False
        )
        for p, c in zip(prompts, completions, strict=True)
    ]


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
    """See the module docstring. Use as a context manager; ``base_url`` is ``http://127.0.0.1:PORT``."""

    def __init__(
        self,
        *,
        server: str = "vllm",
        num_labels: int = 2,
        latency_s: float = 0.0,
        max_concurrent: int | None = None,
        plan: Callable[[int, dict[str, Any]], Response | None] | None = None,
        accept_at_once: int | None = None,
        retry_after: str = "1",
    ) -> None:
        if server not in ("vllm", "sglang"):
            raise ValueError(f"server: expected 'vllm' or 'sglang', got {server!r}")
        super().__init__(
            self._handler_class(),
            latency_s=latency_s,
            max_concurrent=max_concurrent,
            plan=plan,
            accept_at_once=accept_at_once,
            retry_after=retry_after,
        )
        self.server = server
        self.num_labels = num_labels
        self.routes = VLLM_ROUTES if server == "vllm" else SGLANG_ROUTES
        self.vllm = VllmApp(self._vllm_answers()) if server == "vllm" and VLLM_VERSION else None
        self.requests = 0
        self.items = 0
        self.refused = 0
        self.bodies: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self.served: list[tuple[float, int]] = []

    @property
    def protocol(self) -> str:
        """Whose request and response classes answer: ``"vllm 0.30.0"`` (installed) or ``"pinned"``."""
        return f"vllm {VLLM_VERSION}" if self.vllm is not None else "pinned"

    @property
    def base_url(self) -> str:
        """The server root, ``http://127.0.0.1:PORT`` (``url`` is the same with ``/v1``)."""
        return self.url.removesuffix("/v1")

    def answered(self, arrival: float, status: int) -> None:
        """Count a fault's answer and record it in ``served``."""
        super().answered(arrival, status)
        with self._lock:
            self.served.append((arrival, status))

    def logits(self, text: str) -> list[float]:
        """This server's logits for ``text`` (its ``num_labels``)."""
        return expected_logits(text, self.num_labels)

    def _handler_class(self) -> type[ScriptedHandler]:
        server = self

        class Handler(ScriptedHandler):
            owner = server

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                body = self.read_json()
                path = self.path.split("?", 1)[0]
                if path not in server.routes:
                    with server._lock:
                        server.refused += 1
                    self.send(404, {"detail": "Not Found"})
                    return
                with server._lock:
                    server.requests += 1
                    number = server.requests
                    server.items += len(_texts(path, body))
                    server.bodies.append(body)
                    server.paths.append(path)
                with server.in_flight():
                    turn = self.take_turn(number, body)
                    if turn is not None:
                        self._serve(turn, path, body)

            def _serve(self, turn: Turn, path: str, body: dict[str, Any]) -> None:
                if turn.planned is not None and turn.planned.text is not None:
                    status, reply = 200, None
                elif server.vllm is not None:
                    status, reply = server.vllm.post(path, body)
                else:
                    status, reply = server._pinned(path, body)
                with server._lock:
                    server.served.append((turn.arrival, status))
                    server.refused += 400 <= status < 500
                if reply is None:
                    self._send_raw(turn.planned.text or "")  # type: ignore[union-attr]
                else:
                    self.send(status, reply)

            def _send_raw(self, text: str) -> None:
                data = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def _vllm_answers(self) -> dict[str, Answer]:
        """The stand-in engine behind vLLM's routers: vLLM's response objects for its requests."""
        p = protocol()

        def usage(texts: list[str]) -> Any:
            tokens = _tokens(texts)
            return p.UsageInfo(prompt_tokens=tokens, total_tokens=tokens)

        def texts_of(request: Any) -> list[str]:
            if isinstance(request, (p.ClassificationChatRequest, p.PoolingChatRequest)):
                return [conversation_text(request.messages)]
            value = request.input
            return [value] if isinstance(value, str) else list(value)

        def classify(request: Any, headers: Any) -> Any:
            texts = texts_of(request)
            data = []
            for index, text in enumerate(texts):
                probs = self._activated(text, request.use_activation is not False)
                label = LABELS[max(range(len(probs)), key=probs.__getitem__)]
                data.append(
                    p.ClassificationData(
                        index=index, label=label, probs=probs, num_classes=len(probs)
                    )
                )
            return p.ClassificationResponse(
                model=request.model or MODEL, data=data, usage=usage(texts)
            )

        def pooling(request: Any, headers: Any) -> Any:
            texts = texts_of(request)
            data = [
                p.PoolingResponseData(index=index, data=self.logits(text))
                for index, text in enumerate(texts)
            ]
            return p.PoolingResponse(model=request.model or MODEL, data=data, usage=usage(texts))

        def generative_scoring(request: Any, headers: Any) -> Any:
            texts = _scored_texts(request.query, request.items, request.item_first)
            data = [
                p.GenerativeScoringItemResult(index=index, score=expected_score(text))
                for index, text in enumerate(texts)
            ]
            return p.GenerativeScoringResponse(
                id=f"genscore-{uuid.uuid4().hex}",
                model=request.model or MODEL,
                data=data,
                usage=usage(texts),
            )

        return {
            "classify": classify,
            "pooling": pooling,
            "generative_scoring": generative_scoring,
        }

    def _activated(self, text: str, activation: bool) -> list[float]:
        """vLLM's classify ``probs``: softmax (sigmoid for one label), or the logits without activation."""
        logits = self.logits(text)
        if not activation:
            return logits
        if len(logits) == 1:
            return [1.0 / (1.0 + math.exp(-logits[0]))]
        return _softmax(logits)

    def _pinned(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """The same routes without vLLM installed: vLLM's (or SGLang's) shapes as pinned here."""
        problem = _pinned_problem(path, body)
        if problem:
            return 400, {
                "error": {"message": problem, "type": "Bad Request", "param": None, "code": 400}
            }
        texts = _texts(path, body)
        model = body.get("model") or MODEL
        common = {"model": model, "usage": _usage(texts)}
        if path == "/generative_scoring":
            data: list[dict[str, Any]] = [
                {"index": index, "object": "score", "score": expected_score(text)}
                for index, text in enumerate(texts)
            ]
            return 200, {"id": f"genscore-{uuid.uuid4().hex}", **_listed(data), **common}
        if path == "/pooling":
            data = [
                {"index": index, "object": "pooling", "data": self.logits(text)}
                for index, text in enumerate(texts)
            ]
            return 200, {"id": f"pool-{uuid.uuid4().hex}", **_listed(data), **common}
        if path == "/v1/embeddings":
            data = [
                {"embedding": self.logits(text), "index": index, "object": "embedding"}
                for index, text in enumerate(texts)
            ]
            return 200, {"data": data, "model": model, "object": "list", "usage": _usage(texts)}
        activate = path == "/v1/classify" or body.get("use_activation") is not False
        data = []
        for index, text in enumerate(texts):
            if path == "/v1/classify":  # SGLang: always a softmax over the labels
                probs = _softmax(self.logits(text))
            else:
                probs = self._activated(text, activate)
            label = LABELS[max(range(len(probs)), key=probs.__getitem__)]
            data.append({"index": index, "label": label, "probs": probs, "num_classes": len(probs)})
        return 200, {"id": f"classify-{uuid.uuid4().hex}", **_listed(data), **common}


def _pinned_problem(path: str, body: Any) -> str:
    """Why the pinned protocol refuses ``body`` (the request classes' required fields); ``""``: none."""
    if not isinstance(body, dict):
        return "body: expected a JSON object"
    if path == "/generative_scoring":
        missing = [k for k in ("query", "items", "label_token_ids") if k not in body]
    elif path.startswith("/v1/"):  # SGLang's ClassifyRequest and EmbeddingRequest
        missing = [] if "input" in body else ["input"]
    else:
        missing = [] if "input" in body or "messages" in body else ["input or messages"]
    if "normalize" in body and not path.startswith("/v1/"):
        return "Parameter `normalize` was removed; use `use_activation` instead."
    return f"missing fields: {missing}" if missing else ""


def _listed(data: list[dict[str, Any]]) -> dict[str, Any]:
    return {"object": "list", "created": int(time.time()), "data": data}


def _scored_texts(query: str, items: list[str], item_first: bool) -> list[str]:
    return [item + query if item_first else query + item for item in items]


def _texts(path: str, body: dict[str, Any]) -> list[str]:
    """The texts a request scores, in order (as the server reads them)."""
    if path == "/generative_scoring":
        return _scored_texts(
            body.get("query", ""), body.get("items") or [], bool(body.get("item_first"))
        )
    if "messages" in body and not path.startswith("/v1/"):
        return [conversation_text(body["messages"])]
    value = body.get("input", [])
    return [value] if isinstance(value, str) else list(value)


def _tokens(texts: list[str]) -> int:
    return sum(max(1, len(text) // 4) for text in texts)


def _usage(texts: list[str]) -> dict[str, Any]:
    tokens = _tokens(texts)
    return {
        "prompt_tokens": tokens,
        "total_tokens": tokens,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
    }
