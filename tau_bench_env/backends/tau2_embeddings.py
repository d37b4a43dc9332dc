"""banking_knowledge's ``KB_search`` over embeddings from an OpenAI-compatible endpoint.

tau2-bench's embedding setups (``openai_embeddings``, ``qwen_embeddings`` and
their ``_grep`` variants) embed every document of the knowledge base and each
query through OpenAI's or OpenRouter's API, then rank the documents by cosine
similarity (``tau2.knowledge``'s ``embedding_indexer``, ``embedding_encoder``
and ``cosine`` retriever). :class:`EndpointSearch` does the same through the
env config's ``embeddings`` endpoint, asked through the judge's chat client
(:class:`~skyrl_rewards.rewards.models.chat_client.ChatClient`, route
``/embeddings``: its limits, retries and breaker): documents embedded as they
are, in batches of :data:`BATCH`, on the first search of the process (not when
the domain loads, so that an outage voids episodes instead of failing the
env's construction); a query as it is, or for a Qwen model prefixed with
tau2's instruction (``Instruct: ...\\nQuery:...``); the top 10 by cosine
similarity, ties in tau2's order (``argsort`` reversed). Its result renders
as tau2's ``KB_search`` does (the same ``RetrievalResult``).

An endpoint that gives no usable answer (after its retries) raises
:class:`~tau_bench_env.backends.protocol.ServiceUnavailableError` naming the
cause: the episode is masked, never scored; the documents are embedded again
on the next search.
"""

from __future__ import annotations

import dataclasses
import importlib
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tau_bench_env.backends.protocol import ServiceUnavailableError

BATCH = 64
"""Texts per ``/embeddings`` request (OpenAI takes up to 2,048)."""
QWEN_INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
"""tau2's query instruction for Qwen embedding models (``openrouter_embedder``)."""


def endpoint_config(embeddings: Mapping[str, Any]) -> Any:
    """The :class:`EndpointConfig` of the env config's ``embeddings`` mapping.

    Raises ``ValueError`` naming the field (``tokens_per_minute`` is refused: the
    client counts chat messages, which an embeddings request has none of).
    """
    module = importlib.import_module("skyrl_rewards.rewards.models.endpoint_config")
    config = module.EndpointConfig.from_mapping(embeddings)
    if config.tokens_per_minute is not None:
        raise ValueError(
            "embeddings.limits.tokens_per_minute: not applied to an embeddings endpoint "
            "(its requests have no chat messages to count); use requests_per_minute"
        )
    return dataclasses.replace(config, cache_size=0)


def _vectors(data: dict[str, Any], count: int) -> str | np.ndarray:
    """The ``data[i].embedding`` vectors of a reply in input order, or why there are none."""
    items = data.get("data")
    if not isinstance(items, list) or len(items) != count:
        return f"reply has no data list of {count} embeddings"
    try:
        ordered = sorted(items, key=lambda item: item["index"])
        matrix = np.asarray([item["embedding"] for item in ordered], dtype=np.float64)
    except (KeyError, TypeError, ValueError):
        return "reply's data items are not {index, embedding: [numbers]}"
    if matrix.ndim != 2 or matrix.shape[1] == 0:
        return "reply's embeddings are not vectors of one length"
    return matrix


class EndpointSearch:
    """The retrieval pipeline ``KB_search`` calls (``retrieve``, ``get_document_title``,
    ``get_document_content``), over embeddings from ``config``'s endpoint.

    ``documents`` are tau2's ``{"id", "text", "title"}`` of every document;
    ``query_prefix`` is what each query is prefixed with (empty for OpenAI models).
    """

    def __init__(
        self,
        config: Any,
        documents: Sequence[Mapping[str, str]],
        *,
        top_k: int = 10,
        query_prefix: str = "",
    ) -> None:
        self.config = config
        self.top_k = top_k
        self.query_prefix = query_prefix
        self._ids = [str(d["id"]) for d in documents]
        self._texts = [str(d["text"]) for d in documents]
        self._titles = {str(d["id"]): str(d.get("title") or "") for d in documents}
        self._contents = dict(zip(self._ids, self._texts, strict=True))
        self._index: np.ndarray | None = None
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Embeddings of ``texts`` (one request per :data:`BATCH`); raises
        :class:`ServiceUnavailableError` naming the cause when the endpoint gives none."""
        module = importlib.import_module("skyrl_rewards.rewards.models.chat_loop")
        key = "embeddings:" + module.endpoint_key(dataclasses.asdict(self.config))
        loop = module.loop_thread()
        parts = []
        for start in range(0, len(texts), BATCH):
            batch = list(texts[start : start + BATCH])

            def check(data: dict[str, Any], count: int = len(batch)) -> str:
                got = _vectors(data, count)
                return got if isinstance(got, str) else ""

            async def send(body: dict[str, Any], check: Any = check) -> Any:
                client = loop.clients.get(key)
                if client is None:
                    client = loop.clients[key] = module.ChatClient(self.config)
                return await client.post(body, check, path="/embeddings")

            body = {"model": self.config.model, "input": batch, **dict(self.config.extra_body)}
            reply = loop.submit(send(body)).result(timeout=self.config.deadline_s + 60.0)
            if not reply.ok:
                raise ServiceUnavailableError(
                    f"embeddings endpoint {self.config.base_url} ({self.config.model}) gave no "
                    f"embeddings: {reply.failure}: {reply.message}"
                )
            parts.append(_vectors(reply.data, len(batch)))
        return np.vstack(parts)

    def _documents(self) -> np.ndarray:
        """The documents' embeddings, asked for once per process (again after a failure)."""
        with self._lock:
            if self._index is None:
                self._index = self.embed(self._texts)
            return self._index

    def retrieve(self, query: str, *, return_timing: bool = True, top_k: int | None = None) -> Any:
        """tau2's ``RetrievalResult`` of ``query``: the top documents by cosine similarity."""
        pipeline = importlib.import_module("tau2.knowledge.pipeline")
        start = time.perf_counter()
        documents = self._documents()
        vector = self.embed([self.query_prefix + query])[0]
        norm = np.linalg.norm(vector)
        if norm == 0:
            scores = np.zeros(len(self._ids))
        else:
            norms = np.linalg.norm(documents, axis=1)
            scores = documents @ (vector / norm) / np.where(norms == 0, 1, norms)
        count = min(top_k or self.top_k, len(self._ids))
        top = np.argsort(scores)[::-1][:count]
        results = [(self._ids[i], float(scores[i])) for i in top]
        timing = pipeline.RetrievalTiming(retrieval_ms=1000 * (time.perf_counter() - start))
        return pipeline.RetrievalResult(results=results, timing=timing)

    def get_document_title(self, doc_id: str) -> str | None:
        return self._titles.get(doc_id)

    def get_document_content(self, doc_id: str) -> str | None:
        return self._contents.get(doc_id)


def query_prefix(model: str, embedder_type: str | None) -> str:
    """tau2's prefix of a query for the setup's model: Qwen's instruction, else nothing.

    >>> query_prefix("text-embedding-3-large", "openai")
    ''
    >>> query_prefix("qwen3-embedding-8b", "openrouter")[:9]
    'Instruct:'
    """
    if embedder_type == "openrouter" and "qwen" in model.lower():
        return f"Instruct: {QWEN_INSTRUCTION}\nQuery:"
    return ""
