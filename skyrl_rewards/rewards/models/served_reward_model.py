"""A served reward model: vLLM's (or SGLang's) pooling endpoints, through the judge's client machinery.

:class:`ServedRewardModelClient` is a
:class:`~skyrl_rewards.rewards.models.chat_client.ChatClient` (limits in
flight / per minute / tokens per minute, retries honouring ``Retry-After``, a
circuit breaker, a deadline, metrics, cost: see that module) that turns each
reward-model :class:`~skyrl_rewards.rewards.contract.lanes.ModelRequest` into
exactly one :class:`~skyrl_rewards.rewards.contract.lanes.ModelOutcome` whose
``value`` is the raw score. It runs where judge requests run: the pool's
judge lane (one asynchronous actor per pool, so the limits hold for the whole
pool) or, in this process, the private event loop thread of
:func:`~skyrl_rewards.rewards.models.judge_client.run_judge_requests`. Its
requests are I/O: they never go to the reward-model worker group.

The servers and their routes, mounted at the server root (``base_url`` given
with a trailing ``/v1`` is taken without it, once, with a note in the log, so
that one endpoint block serves a judge's ``/v1/chat/completions`` and a reward
model's ``/classify`` of one server). ``server: vllm`` (the default; request
and response classes of vLLM 0.30, tested against them in
``tests/models/test_vllm_protocol.py``):

- ``classify`` (``POST /classify``, ``vllm/entrypoints/pooling/classify``):
  ``{"model", "input": [str, ...]}`` or ``{"model", "messages": [...]}`` (one
  conversation), with ``use_activation``, ``truncate_prompt_tokens``,
  ``priority``, ``mm_processor_kwargs`` when set; reply ``{"data": [{"index",
  "label", "probs", "num_classes"}], "usage"}``. The value is ``probs[label]``:
  the label's probability (a sigmoid for a one-label model), or its raw logit
  with ``use_activation: false``.
- ``pooling`` (``POST /pooling``, ``vllm/entrypoints/pooling/pooling``): the
  same inputs; reply ``{"data": [{"index", "data": float | [float, ...]}],
  "usage"}``. The value is ``data[index]``.
- ``generative_scoring`` (``POST /generative_scoring``,
  ``vllm/entrypoints/generate/generative_scoring``): ``{"model", "query",
  "items": [str, ...], "label_token_ids": [yes, no]}``; reply ``{"data":
  [{"index", "score"}], "usage"}``, ``score`` the first label's probability
  normalised over the label ids (``apply_softmax``, vLLM's default): the text
  scored is ``query + item`` and the value is ``P(yes) / (P(yes) + P(no))``.

``server: sglang`` (shapes pinned to SGLang 0.5.23's source,
``python/sglang/srt/entrypoints/openai/protocol.py``, ``serving_embedding.py``
and ``serving_classify.py``, since sglang cannot be a dependency beside vLLM
0.30; checked against its own classes in ``tests/models/test_sglang_protocol.py``
where its protocol module imports):

- ``embeddings`` (``POST /v1/embeddings``, a model served with
  ``--is-embedding``): ``{"model", "input": [str, ...]}``; reply ``{"data":
  [{"index", "embedding": [float, ...]}], "usage"}``. The value is
  ``embedding[index]``: a reward model's raw score (what verl reads).
- ``classify`` (``POST /v1/classify``): ``{"model", "input": [str, ...]}``;
  reply as vLLM's classify, but ``probs`` is always a softmax over the labels
  (``use_activation`` is not taken): a one-label model scores exactly 1.0 for
  every input. So it is refused unless ``labels`` names two or more labels.

Input: with ``input: text`` (the default) the row's chat is rendered to text
by the same code as the local reward model
(:func:`~skyrl_rewards.rewards.models.reward_model_payload.render_payload`: the chat
template of the local tokenizer folder named by ``tokenizer``; without one the
contents joined by newlines; text a template rendered goes with
``add_special_tokens: false``, as the local path tokenizes it), and requests
that arrive within
``batch_wait_s`` of each other go as one HTTP request of at most
``batch_size`` inputs. Each item gets its own value; a failed batch request
fails every item of it with the request's cause (masked; not split: the
endpoint's retries already ran). With ``input: messages`` the chat goes as
``messages`` (image parts included), one conversation per request: no batching.

Failures never raise: an input that cannot be rendered is ``model_error``; a
reply without a value for every input, or a value that is not a number, is
``bad_response``; the client's failures (connect, timeout, 429 past the budget,
5xx, breaker open) are its own. The component settles each as a masked score
naming the cause.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.chat_client import ChatClient, ChatReply
from skyrl_rewards.rewards.models.endpoint_config import EndpointConfig
from skyrl_rewards.rewards.models.endpoint_hold import server_root

ROUTES = {
    "vllm": {
        "classify": "/classify",
        "pooling": "/pooling",
        "generative_scoring": "/generative_scoring",
    },
    "sglang": {"embeddings": "/v1/embeddings", "classify": "/v1/classify"},
}
"""Each ``server``'s APIs and their routes under the server root (``path`` overrides one)."""

SERVED_APIS = ("classify", "pooling", "generative_scoring", "embeddings")
"""Values of ``api`` (which ``server`` serves which: :data:`ROUTES`)."""

SERVED_KIND = "served_reward_model"
"""The ``kind`` an endpoint mapping carries when it is a served reward model (not a chat judge)."""

logger = logging.getLogger(__name__)

_EXTRAS = ("use_activation", "truncate_prompt_tokens", "priority", "mm_processor_kwargs")
_VLLM_ONLY = ("use_activation", "truncate_prompt_tokens", "mm_processor_kwargs")


@dataclass(frozen=True)
class ServedConfig:
    """A served reward model: its endpoint (the chat client's settings) and how to ask it.

    ``label``: which probability (or logit) of ``classify`` is the value: an
    index into ``probs``, or a label name (``"LABEL_1"``, or a name of
    ``labels``, the model's ``id2label`` in order); ``None`` takes the last
    (the only one of a single-logit reward model, the positive one of two).
    ``index``: which element of a ``pooling`` value. ``label_token_ids``:
    ``[yes, no]`` token ids for ``generative_scoring``, whose ``query`` is put
    before every item. ``batch_size`` (inputs per request) and
    ``batch_wait_s`` (seconds an input waits for others) set batching.
    ``server`` (``vllm`` or ``sglang``) picks the routes and request fields.
    """

    endpoint: EndpointConfig
    api: str = "classify"
    server: str = "vllm"
    path: str | None = None
    input: str = "text"
    label: int | str | None = None
    labels: tuple[str, ...] | None = None
    index: int = 0
    use_activation: bool | None = None
    truncate_prompt_tokens: int | None = None
    priority: int | None = None
    mm_processor_kwargs: Mapping[str, Any] | None = None
    label_token_ids: tuple[int, ...] | None = None
    query: str = ""
    batch_size: int = 32
    batch_wait_s: float = 0.005
    label_position: int | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if self.server not in ROUTES:
            raise ValueError(
                f"endpoint.server: expected one of {list(ROUTES)}, got {self.server!r}"
            )
        if self.api not in ROUTES[self.server]:
            raise ValueError(
                f"endpoint.api: {self.server} serves {list(ROUTES[self.server])}, got {self.api!r}"
            )
        if self.server == "sglang":
            self._check_sglang()
        if self.input not in ("text", "messages"):
            raise ValueError(f"endpoint.input: expected 'text' or 'messages', got {self.input!r}")
        if self.input == "messages" and self.api == "generative_scoring":
            raise ValueError("endpoint.input: generative_scoring takes text only (input: text)")
        if self.path is not None and (
            not isinstance(self.path, str) or not self.path.startswith("/")
        ):
            raise ValueError(
                f"endpoint.path: expected a route such as '/classify', got {self.path!r}"
            )
        if (
            isinstance(self.batch_size, bool)
            or not isinstance(self.batch_size, int)
            or self.batch_size < 1
        ):
            raise ValueError(
                f"endpoint.batch_size: expected an integer >= 1, got {self.batch_size!r}"
            )
        if not isinstance(self.batch_wait_s, (int, float)) or not 0 <= self.batch_wait_s <= 10:
            raise ValueError(
                f"endpoint.batch_wait_s: expected seconds in [0, 10], got {self.batch_wait_s!r}"
            )
        if isinstance(self.index, bool) or not isinstance(self.index, int) or self.index < 0:
            raise ValueError(f"endpoint.index: expected a non-negative integer, got {self.index!r}")
        if self.api == "generative_scoring" and (
            self.label_token_ids is None
            or len(self.label_token_ids) != 2
            or not all(isinstance(i, int) and not isinstance(i, bool) for i in self.label_token_ids)
        ):
            raise ValueError(
                "endpoint.label_token_ids: generative_scoring needs [yes_id, no_id] (the "
                f"tokenizer's ids of the two answers), got {self.label_token_ids!r}"
            )
        object.__setattr__(self, "label_position", self._label_position())

    def _check_sglang(self) -> None:
        """Refuse what SGLang would ignore or reject (see the module docstring)."""
        for key in _VLLM_ONLY:
            if getattr(self, key) is not None:
                raise ValueError(
                    f"endpoint.{key}: SGLang's /v1/{self.api} does not take it (vLLM's does); "
                    "remove it"
                )
        if self.input != "text":
            raise ValueError(
                "endpoint.input: SGLang's reward routes take text (input: text), not messages"
            )
        if self.api == "classify" and len(self.labels or ()) < 2:
            raise ValueError(
                "endpoint.api: SGLang's /v1/classify returns a softmax over the model's labels "
                "and ignores use_activation, so a one-label reward model scores exactly 1.0 for "
                "every input. Serve the reward model with --is-embedding and set api: embeddings "
                "(its raw score, as verl reads it), or, for a classifier of two or more labels, "
                "list its id2label names in labels"
            )

    def _label_position(self) -> int | None:
        label = self.label
        if label is None:
            return None
        if isinstance(label, int) and not isinstance(label, bool) and label >= 0:
            return label
        if isinstance(label, str):
            if self.labels is not None and label in self.labels:
                return list(self.labels).index(label)
            match = re.fullmatch(r"LABEL_(\d+)", label)
            if match:
                return int(match.group(1))
        raise ValueError(
            f"endpoint.label: expected an index into probs, 'LABEL_<n>' or a name in labels "
            f"({list(self.labels or [])}), got {label!r}"
        )

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> ServedConfig:
        """From an endpoint mapping: these fields, the rest the chat client's; ``ValueError`` when bad."""
        if not isinstance(config, Mapping):
            raise ValueError(f"endpoint: expected a mapping, got {type(config).__name__}")
        own = {f.name for f in dataclasses.fields(cls) if f.init} - {"endpoint"}
        mine = {k: v for k, v in config.items() if k in own}
        rest = {k: v for k, v in config.items() if k not in own and k != "kind"}
        for key in ("labels", "label_token_ids"):
            if mine.get(key) is not None:
                if not isinstance(mine[key], (list, tuple)):
                    raise ValueError(f"endpoint.{key}: expected a list, got {mine[key]!r}")
                mine[key] = tuple(mine[key])
        return cls(endpoint=EndpointConfig.from_mapping(rest), **mine)

    def to_mapping(self) -> dict[str, Any]:
        """The plain mapping (``kind`` included) that :meth:`from_mapping` reads back."""
        mapping = dataclasses.asdict(self.endpoint)
        for f in dataclasses.fields(self):
            if f.init and f.name != "endpoint":
                value = getattr(self, f.name)
                mapping[f.name] = list(value) if isinstance(value, tuple) else value
        mapping["kind"] = SERVED_KIND
        return mapping

    @property
    def route(self) -> str:
        """The path posted to under the server root."""
        return self.path or ROUTES[self.server][self.api]

    @property
    def batching(self) -> bool:
        """True when inputs are sent many per request (text input and ``batch_size`` above 1)."""
        return self.input == "text" and self.batch_size > 1


@dataclass
class _Waiting:
    item: str | list[dict[str, Any]]
    future: asyncio.Future[ModelOutcome]


class ServedRewardModelClient(ChatClient):
    """One served reward model's asynchronous client; use it from one event loop.

    ``transport`` (an ``httpx`` transport) is for tests of this class only.
    """

    def __init__(self, config: ServedConfig, *, transport: Any = None) -> None:
        root = server_root(config.endpoint.base_url)
        if root != config.endpoint.base_url.rstrip("/"):
            logger.info(
                "served reward model %s: base_url %s is taken as the server root %s (its "
                "routes, %s, are not under /v1)",
                config.endpoint.model,
                config.endpoint.base_url,
                root,
                config.route,
            )
        super().__init__(dataclasses.replace(config.endpoint, base_url=root), transport=transport)
        self.served = config
        self._waiting: list[_Waiting] = []
        self._timer: asyncio.TimerHandle | None = None
        self._sending: set[asyncio.Task[None]] = set()
        self._tokenizer: Any = None
        self._tokenizer_error = ""
        self._batches = 0
        self._items = 0

    async def complete(self, request: ModelRequest) -> ModelOutcome:
        """The outcome of ``request``: its raw value, or a failure; never raises for the endpoint."""
        try:
            item = self._item(request.payload)
        except ValueError as error:
            return ModelOutcome(failure="model_error", message=str(error))
        if not self.served.batching:
            return (await self._send([item]))[0]
        future: asyncio.Future[ModelOutcome] = asyncio.get_running_loop().create_future()
        self._waiting.append(_Waiting(item, future))
        if len(self._waiting) >= self.served.batch_size:
            self._flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(
                self.served.batch_wait_s, self._flush
            )
        return await future

    def metrics(self) -> dict[str, Any]:
        """The chat client's metrics, with ``batches`` (HTTP requests sent) and ``items`` in them."""
        metrics = super().metrics()
        metrics["batches"] = self._batches
        metrics["items"] = self._items
        return metrics

    async def _token_estimate(self, body: Mapping[str, Any]) -> int:
        """Prompt tokens of the request's inputs, counted as the chat client counts a chat's.

        No completion tokens (a pooling model writes none); corrected from the
        reply's ``usage``; 0 without a tokens-per-minute limit.
        """
        if self._token_counter is None:
            return 0
        chat = body.get("messages")
        if chat is None:
            texts = body.get("input") or [body.get("query", "") + i for i in body.get("items", [])]
            chat = [{"role": "user", "content": "\n".join(texts)}]
        self._shard()  # the HTTP clients exist: /tokenize goes over them
        return await self._token_counter.count(chat, self._shards[0])

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        size = self.served.batch_size
        while self._waiting:
            batch, self._waiting = self._waiting[:size], self._waiting[size:]
            task = asyncio.ensure_future(self._answer(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _answer(self, batch: list[_Waiting]) -> None:
        """Settle every waiting row of ``batch``, also when sending raised (a bug: logged)."""
        try:
            outcomes = await self._send([waiting.item for waiting in batch])
        except Exception as error:  # noqa: BLE001 - the batch's rows must not wait forever
            logger.exception("served reward model batch failed")
            failed = ModelOutcome(failure="model_error", message=f"{type(error).__name__}: {error}")
            outcomes = [failed] * len(batch)
        for waiting, outcome in zip(batch, outcomes, strict=True):
            if not waiting.future.done():
                waiting.future.set_result(outcome)

    async def _send(self, items: list[Any]) -> list[ModelOutcome]:
        self._batches += 1
        self._items += len(items)
        served = self.served
        values: list[float] = []

        def check(data: dict[str, Any]) -> str:
            found = _values(served, data, len(items))
            if isinstance(found, str):
                return found
            values.extend(found)
            return ""

        reply = await self.post(self._body(items), check, path=served.route)
        if not reply.ok:
            return [_failed(reply)] * len(items)
        shares = _shares(reply.tokens_in, len(items))
        return [
            ModelOutcome(value=value, tokens_in=share, latency_s=reply.latency_s)
            for value, share in zip(values[-len(items) :], shares, strict=True)
        ]

    def _body(self, items: list[Any]) -> dict[str, Any]:
        served = self.served
        body: dict[str, Any] = {}
        rendered = served.input == "text" and getattr(self._tokenizer, "chat_template", None)
        if rendered and served.server == "vllm":
            body["add_special_tokens"] = False  # the template wrote them, as on the local path
        body.update(served.endpoint.extra_body)
        body["model"] = served.endpoint.model
        if served.api == "generative_scoring":
            body.update(
                query=served.query, items=items, label_token_ids=list(served.label_token_ids or ())
            )
            return body
        if served.input == "messages":
            body["messages"] = items[0]
        else:
            body["input"] = items
        for key in _EXTRAS if served.server == "vllm" else ("priority",):
            value = getattr(served, key)
            if value is not None:
                body[key] = dict(value) if isinstance(value, Mapping) else value
        return body

    def _item(self, payload: Mapping[str, Any]) -> str | list[dict[str, Any]]:
        """What one request sends: its chat (``input: messages``) or its text; ``ValueError`` when unreadable."""
        from skyrl_rewards.rewards.models.reward_model_payload import render_payload

        if self.served.input == "messages":
            messages = payload.get("messages") if isinstance(payload, Mapping) else None
            if not isinstance(messages, list) or not messages:
                raise ValueError("payload: expected 'messages' (a non-empty list)")
            return messages
        return render_payload(self._chat_tokenizer(), payload)

    def _chat_tokenizer(self) -> Any:
        """The local tokenizer whose chat template renders text input (``None`` without ``tokenizer``)."""
        folder = self.served.endpoint.tokenizer
        if folder is None or folder == "bytes":
            return None
        if self._tokenizer is None and self._token_counter is not None:
            self._tokenizer = self._token_counter.local_tokenizer  # loaded once, for the limits
        if self._tokenizer is None and not self._tokenizer_error:
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            except (OSError, ValueError) as error:
                self._tokenizer_error = f"tokenizer {folder!r} does not load: {error}"
        if self._tokenizer_error:
            raise ValueError(self._tokenizer_error)
        return self._tokenizer


def _failed(reply: ChatReply) -> ModelOutcome:
    return ModelOutcome(failure=reply.failure, message=reply.message, latency_s=reply.latency_s)


def _shares(total: int, count: int) -> list[int]:
    """``total`` tokens split over ``count`` items (the first take the remainder)."""
    base, extra = divmod(total, count)
    return [base + (position < extra) for position in range(count)]


def _values(served: ServedConfig, data: dict[str, Any], count: int) -> list[float] | str:
    """One raw value per input from a reply, in input order; or why the reply is not usable."""
    entries = data.get("data") if isinstance(data, dict) else None
    if not isinstance(entries, list) or len(entries) != count:
        return f"reply has no data list of {count} entries: {json.dumps(data)[:200]}"
    values: list[float | None] = [None] * count
    for position, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"reply's data[{position}] is not an object"
        index = entry.get("index", position)
        if not isinstance(index, int) or not 0 <= index < count or values[index] is not None:
            return f"reply's data[{position}].index is {index!r}: not one per input"
        value = _value(served, entry)
        if isinstance(value, str):
            return f"reply's data[{position}]: {value}"
        values[index] = value
    return [float(v) for v in values if v is not None]


def _value(served: ServedConfig, entry: dict[str, Any]) -> float | str:
    if served.api == "generative_scoring":
        score = entry.get("score")
        return float(score) if _is_number(score) else "no score"
    if served.api in ("pooling", "embeddings"):
        value = entry.get("data" if served.api == "pooling" else "embedding")
        if _is_number(value) and served.index == 0:
            return float(value)
        if (
            isinstance(value, list)
            and served.index < len(value)
            and _is_number(value[served.index])
        ):
            return float(value[served.index])
        return f"{served.api} value has no number at index {served.index}"
    probs = entry.get("probs")
    if not isinstance(probs, list) or not probs:
        return "no probs list"
    if served.labels is not None and len(probs) != len(served.labels):
        return (
            f"{len(probs)} probs, but labels names {len(served.labels)}: not the model the "
            "config describes"
        )
    position = len(probs) - 1 if served.label_position is None else served.label_position
    if position >= len(probs) or not _is_number(probs[position]):
        return f"probs has no number for label {served.label!r} (index {position})"
    return float(probs[position])


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
