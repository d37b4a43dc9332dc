"""vLLM's own HTTP protocol for the loopback servers, where vLLM is installed (``.venv-skyrl``).

:func:`vllm_app` builds a FastAPI app from vLLM's own API routers, mounted as
``vllm serve`` mounts them (``/classify``, ``/pooling``,
``/generative_scoring`` and ``/tokenize`` at the root, ``/v1/chat/completions``),
with vLLM's own exception handlers: FastAPI validates every request with
vLLM's request class for that route (a field or shape vLLM would refuse is
its 400; a route it does not serve is a 404), and the stand-in engine behind
it answers with vLLM's response classes, serialized as vLLM's handlers do
(``JSONResponse(content=response.model_dump())``). :class:`VllmApp` calls it
in-process (starlette's ``TestClient``) from the loopback servers' handler
threads, after their scripted faults.

What the engine computes is the caller's: one function per route that takes
the validated request object and the HTTP headers and returns vLLM's response
object, built with the classes of :func:`protocol` (vLLM's, by name).

Importing vLLM's entrypoints takes 30-60 s and about 1.3 GB on a 2-core
machine, so it happens once, on the first :func:`vllm_app`. Without vLLM
(the main test venv) :data:`VLLM_VERSION` is ``None`` and the servers answer
in the same shapes, pinned (``tests/models/test_vllm_protocol.py`` runs them
both ways in ``.venv-skyrl``).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any


def _installed_vllm() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    return importlib.metadata.version("vllm")


VLLM_VERSION: str | None = _installed_vllm()
"""The installed vLLM's version, or ``None`` when it is not installed."""

_ROUTERS = {
    "classify": "vllm.entrypoints.pooling.classify.api_router",
    "pooling": "vllm.entrypoints.pooling.pooling.api_router",
    "generative_scoring": "vllm.entrypoints.generate.generative_scoring.api_router",
    "chat": "vllm.entrypoints.openai.chat_completion.api_router",
    "tokenize": "vllm.entrypoints.serve.tokenize.api_router",
}

_PROTOCOL: SimpleNamespace | None = None

Answer = Callable[[Any, Mapping[str, str]], Any]
"""The stand-in engine of one route: ``(vLLM's request object, headers) -> vLLM's response object``."""


def protocol() -> SimpleNamespace:
    """vLLM's protocol classes the stand-ins answer with (imported on first use)."""
    global _PROTOCOL
    if _PROTOCOL is None:
        classify = importlib.import_module("vllm.entrypoints.pooling.classify.protocol")
        pooling = importlib.import_module("vllm.entrypoints.pooling.pooling.protocol")
        scoring = importlib.import_module("vllm.entrypoints.generate.generative_scoring.serving")
        chat = importlib.import_module("vllm.entrypoints.openai.chat_completion.protocol")
        engine = importlib.import_module("vllm.entrypoints.serve.engine.protocol")
        tokenize = importlib.import_module("vllm.entrypoints.serve.tokenize.protocol")
        _PROTOCOL = SimpleNamespace(
            ClassificationChatRequest=classify.ClassificationChatRequest,
            ClassificationData=classify.ClassificationData,
            ClassificationResponse=classify.ClassificationResponse,
            PoolingChatRequest=pooling.PoolingChatRequest,
            PoolingResponseData=pooling.PoolingResponseData,
            PoolingResponse=pooling.PoolingResponse,
            GenerativeScoringRequest=scoring.GenerativeScoringRequest,
            GenerativeScoringItemResult=scoring.GenerativeScoringItemResult,
            GenerativeScoringResponse=scoring.GenerativeScoringResponse,
            ChatCompletionRequest=chat.ChatCompletionRequest,
            ChatMessage=chat.ChatMessage,
            ChatCompletionResponseChoice=chat.ChatCompletionResponseChoice,
            ChatCompletionResponse=chat.ChatCompletionResponse,
            TokenizeChatRequest=tokenize.TokenizeChatRequest,
            TokenizeResponse=tokenize.TokenizeResponse,
            UsageInfo=engine.UsageInfo,
        )
    return _PROTOCOL


class _Serving:
    """What vLLM's routers call on ``app.state``: each method answers with the engine's function."""

    def __init__(self, answer: Answer) -> None:
        self._answer = answer

    async def __call__(self, request: Any, raw_request: Any) -> Any:  # classify, pooling
        from fastapi.responses import JSONResponse

        return JSONResponse(content=self._answer(request, raw_request.headers).model_dump())

    async def create_generative_scoring(self, request: Any, raw_request: Any) -> Any:
        return self._answer(request, raw_request.headers)

    async def create_chat_completion(self, request: Any, raw_request: Any) -> Any:
        return self._answer(request, raw_request.headers)

    async def create_tokenize(self, request: Any, raw_request: Any) -> Any:
        return self._answer(request, raw_request.headers)


_STATE = {
    "classify": "serving_classification",
    "pooling": "serving_pooling",
    "generative_scoring": "serving_generative_scoring",
    "chat": "openai_serving_chat",
    "tokenize": "serving_tokenization",
}


def vllm_app(answers: dict[str, Answer]) -> Any:
    """A FastAPI app with vLLM's routers of ``answers``' routes, each answered by its function.

    Keys: ``classify``, ``pooling``, ``generative_scoring``, ``chat``, ``tokenize``.
    """
    from fastapi import FastAPI

    register = importlib.import_module("vllm.entrypoints.serve.exception_handling.register")
    app = FastAPI()
    app.state.args = argparse.Namespace(log_error_stack=False)
    for route, answer in answers.items():
        app.include_router(importlib.import_module(_ROUTERS[route]).router)
        setattr(app.state, _STATE[route], _Serving(answer))
    register.init_exception_handler(app)
    return app


class VllmApp:
    """:func:`vllm_app` called in-process: :meth:`post` gives ``(status, JSON)``."""

    def __init__(self, answers: dict[str, Answer]) -> None:
        from starlette.testclient import TestClient

        self._client = TestClient(vllm_app(answers), raise_server_exceptions=False)

    @property
    def post_routes(self) -> set[str]:
        """The paths vLLM's routers of this app answer ``POST`` on."""
        return {
            route.path
            for route in self._client.app.routes
            if "POST" in (getattr(route, "methods", None) or ())
        }

    def post(
        self, path: str, body: Any, headers: Mapping[str, str] | None = None
    ) -> tuple[int, Any]:
        """POST ``body`` (JSON) to ``path`` as a client would; the status and the reply JSON."""
        response = self._client.post(path, json=body, headers=dict(headers or {}))
        return response.status_code, response.json()
