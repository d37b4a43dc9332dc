"""Run a Hugging Face sequence-classification reward model: one scalar per prompt and completion.

A :class:`RewardModelRunner` loads ``AutoModelForSequenceClassification`` and
its tokenizer once, from a local folder (``local_files_only``: never the
network), and scores :class:`~skyrl_rewards.rewards.contract.lanes.ModelRequest`
s of the reward-model lane. It is what a pool's reward-model worker holds, and
what :func:`~skyrl_rewards.rewards.models.reward_model_runners.runner_for` keeps,
one per endpoint, in this process.

Inputs (the request's payload):

- ``{"messages": [{"role": ..., "content": str}, ...]}``: rendered with the
  tokenizer's chat template (``apply_chat_template(..., tokenize=False)``, then
  tokenized without adding special tokens: the template writes them). A
  tokenizer without a chat template gets plain concatenation instead: the
  messages' contents joined by a newline, tokenized with the tokenizer's own
  special tokens;
- ``{"text": str}``: tokenized as is, with the tokenizer's special tokens.

A payload's ``images`` (:func:`~skyrl_rewards.rewards.models.reward_model_payload.row_images`) are ignored by a text model. A
checkpoint whose ``config.json`` names ``Qwen2_5_VLForSequenceClassification``
is run by :class:`~skyrl_rewards.rewards.models.vl_runner.VisionRewardModelRunner`
instead (images and text through its processor;
:func:`~skyrl_rewards.rewards.models.reward_model_runners.build_runner` picks
the runner).

Scoring: inputs are sorted by length (longest first) and packed into batches
whose padded size (items x longest) stays within ``max_tokens_per_batch``;
each batch is padded on the right with the model's pad token (the model reads
the last token that is not padding). In float32 a value then does not depend on
its batch (to about 1e-6); in bfloat16 it does (the matrix products of a
larger pass round differently: up to 0.02 on values of size 3 for a tiny model
on CPU, 0.13 on size 2 for a 6.5B model on a GPU), and ``batch_invariant``
scores every input alone, unpadded, as a single forward does: its value is
that forward's, whatever it is scored with, at the cost of batching
(docs/reward_models.md gives the figures). The value is the model's raw logit,
in float32; normalisation is the reward component's job.
An input longer than ``max_length`` tokens is, per ``truncation``, a failure
(``"error"``, the default) or cut (``"left"`` keeps its end, ``"right"`` its
start), the cut recorded in the outcome's ``message``.

Failures never raise: a load error, an input that cannot be rendered or is too
long, an out-of-memory batch (split in halves and retried; a single item that
still does not fit fails) or any other error of the forward pass (the batch is
retried item by item, so only the bad item fails) become outcomes with
``failure="model_error"`` and a message naming the cause.

``torch`` and ``transformers`` are imported when a runner is built. Reading and
rendering a payload is :mod:`~skyrl_rewards.rewards.models.reward_model_payload`'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.reward_model_payload import InputError, render

DTYPES = ("bfloat16", "float16", "float32")
"""Values of :attr:`RewardModelConfig.dtype` (``None``: bfloat16 on CUDA, float32 elsewhere)."""

TRUNCATIONS = ("error", "left", "right")
"""Values of :attr:`RewardModelConfig.truncation`."""

VL_ARCHITECTURE = "Qwen2_5_VLForSequenceClassification"
"""The ``architectures`` entry of a vision-language reward model's ``config.json`` (vLLM's name)."""


@dataclass(frozen=True)
class RewardModelConfig:
    """How to load and run one reward model (an endpoint of the reward-model lane)."""

    model: str
    """Local folder holding the model and its tokenizer (``save_pretrained``), or a name in the local HF cache."""
    device: str | None = None
    """``"cuda"``, ``"cuda:1"``, ``"cpu"``...; ``None``: ``cuda`` when available, else ``cpu``."""
    dtype: str | None = None
    """One of :data:`DTYPES`; ``None``: bfloat16 on CUDA, float32 elsewhere."""
    max_length: int = 4096
    """Longest input in tokens (prompt, completion and template together)."""
    max_tokens_per_batch: int = 16384
    """Most padded tokens (items x longest item) in one forward pass."""
    truncation: str = "error"
    """An input past ``max_length``: ``"error"`` (a failure), ``"left"`` (keep the end), ``"right"`` (keep the start)."""
    batch_invariant: bool = False
    """Score every input in a pass of its own, unpadded: its value does not depend on what it is scored with."""

    def __post_init__(self) -> None:
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"model: expected a folder path, got {self.model!r}")
        if self.device is not None and (not isinstance(self.device, str) or not self.device):
            raise ValueError(f"device: expected 'cuda', 'cpu' or None, got {self.device!r}")
        if self.dtype is not None and self.dtype not in DTYPES:
            raise ValueError(f"dtype: expected one of {DTYPES} or None, got {self.dtype!r}")
        for name in ("max_length", "max_tokens_per_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"truncation: expected one of {TRUNCATIONS}, got {self.truncation!r}")
        if not isinstance(self.batch_invariant, bool):
            raise ValueError(
                f"batch_invariant: expected true or false, got {self.batch_invariant!r}"
            )

    @classmethod
    def from_mapping(cls, config: Mapping[str, Any]) -> RewardModelConfig:
        """The config from an endpoint's plain mapping; ``ValueError`` for an unknown key."""
        try:
            return cls(**dict(config))
        except TypeError as error:
            raise ValueError(f"reward model endpoint: bad configuration: {error}") from error

    def to_mapping(self) -> dict[str, Any]:
        """The plain, JSON-able form (what a component's ``endpoints()`` carries)."""
        return asdict(self)


@dataclass
class _Item:
    """One input ready for a forward pass: its request's position, token ids, and a note (a cut)."""

    index: int
    ids: list[int]
    note: str = ""


@dataclass
class RunnerMetrics:
    """Counters since the runner was built (plain numbers, for a pool's metrics)."""

    requests: int = 0
    batches: int = 0
    tokens: int = 0
    padded_tokens: int = 0
    truncated: int = 0
    oom_splits: int = 0
    failures: int = 0
    preprocess_s: float = 0.0
    """Seconds preparing inputs: chat template, tokenizer, a batch's tensors and images."""
    forward_s: float = 0.0
    """Seconds in the model's forward passes."""
    images: int = 0
    """Images through the image processor (a vision-language model)."""
    image_calls: int = 0
    """Image-processor calls: one per batch holding images (its images together)."""


class RewardModelRunner:
    """A reward model loaded once; :meth:`score` gives one outcome per request, in order.

    Building never raises for the model: a load error is kept in
    :attr:`load_error` and every request then fails with it. Thread-safe (one
    forward pass at a time).
    """

    def __init__(self, config: RewardModelConfig | Mapping[str, Any]) -> None:
        self.config = (
            config
            if isinstance(config, RewardModelConfig)
            else RewardModelConfig.from_mapping(config)
        )
        self.load_error = ""
        """Why the model did not load (empty when it did)."""
        self.metrics = RunnerMetrics()
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None
        self._pad_id: int | None = None
        self._device = ""
        self._load()

    @property
    def device(self) -> str:
        """Where the model runs (empty when it did not load)."""
        return self._device

    _needs = "install torch and transformers where it runs"
    """What a load error from a missing import says to install."""
    _layout = "model and tokenizer"
    """What a load error from an unreadable checkpoint says the folder holds."""

    def _load(self) -> None:
        """Load the model on the configured device and dtype, or say why not in ``load_error``."""
        path = self.config.model
        try:
            import torch

            device = self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
            dtype_name = self.config.dtype or (
                "bfloat16" if device.startswith("cuda") else "float32"
            )
            model, tokenizer = self._from_pretrained(path, getattr(torch, dtype_name))
            model.to(device).eval()
        except ImportError as error:
            self.load_error = f"reward model {path!r}: {error}; {self._needs}"
            return
        except (OSError, ValueError, RuntimeError, KeyError, TypeError) as error:
            self.load_error = (
                f"reward model {path!r} failed to load: {type(error).__name__}: {error}. "
                f"Give a local folder written by save_pretrained ({self._layout})"
            )
            return
        except AssertionError as error:  # torch's CPU-only build asked for CUDA
            self.load_error = (
                f"reward model {path!r}: device {self.config.device!r} is not usable here: {error}"
            )
            return
        if model.config.num_labels != 1:
            self.load_error = (
                f"reward model {path!r} has {model.config.num_labels} labels; a reward model "
                "has one (num_labels=1, a scalar score)"
            )
            return
        self._model, self._tokenizer = model, tokenizer
        self._pad_id = self._padding(model, tokenizer)
        self._device = device

    def _from_pretrained(self, path: str, dtype: Any) -> tuple[Any, Any]:
        """The checkpoint at ``path``: its model in ``dtype`` (on the CPU) and its tokenizer."""
        import transformers
        from packaging.version import Version
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        # transformers 4.56 renamed torch_dtype to dtype
        dtype_key = (
            "dtype" if Version(transformers.__version__) >= Version("4.56") else "torch_dtype"
        )
        model = AutoModelForSequenceClassification.from_pretrained(
            path, local_files_only=True, **{dtype_key: dtype}
        )
        return model, tokenizer

    def _padding(self, model: Any, tokenizer: Any) -> int | None:
        """The pad id (the model's, else the tokenizer's pad or end); the model is given it."""
        text_config = model.config.get_text_config()
        pad_id = text_config.pad_token_id
        if pad_id is None:
            pad_id = tokenizer.pad_token_id
        if pad_id is None:
            pad_id = tokenizer.eos_token_id
        if pad_id is not None:
            text_config.pad_token_id = pad_id  # the model finds each row's last token by it
        return pad_id

    def score(self, requests: Sequence[ModelRequest]) -> list[ModelOutcome]:
        """One outcome per request, in order: ``value`` the raw scalar, or ``failure="model_error"``.

        Never raises for an input or for the model (see the module doc).
        """
        with self._lock:
            return self._score(requests)

    def _score(self, requests: Sequence[ModelRequest]) -> list[ModelOutcome]:
        self.metrics.requests += len(requests)
        if self.load_error:
            self.metrics.failures += len(requests)
            return [_failure(self.load_error) for _ in requests]
        outcomes: list[ModelOutcome | None] = [None] * len(requests)
        started = time.perf_counter()
        items = self._items(requests, outcomes)
        self.metrics.preprocess_s += time.perf_counter() - started
        for batch in self._batches(items):
            self._run(batch, outcomes)
        self.metrics.failures += sum(1 for o in outcomes if o is not None and not o.ok)
        assert all(outcome is not None for outcome in outcomes)
        return outcomes  # type: ignore[return-value]

    def _items(
        self, requests: Sequence[ModelRequest], outcomes: list[ModelOutcome | None]
    ) -> list[_Item]:
        """The requests' inputs, tokenized and fitted; a bad input's failure goes to ``outcomes``."""
        texts: dict[bool, list[tuple[int, str]]] = {True: [], False: []}
        for index, request in enumerate(requests):
            try:
                text, add_special_tokens = render(self._tokenizer, request.payload)
            except InputError as error:
                outcomes[index] = _failure(str(error))
            else:
                texts[add_special_tokens].append((index, text))
        items = []
        for add_special_tokens, group in texts.items():
            if not group:
                continue
            encoded = self._tokenizer(
                [text for _, text in group], add_special_tokens=add_special_tokens
            )["input_ids"]
            for (index, _), ids in zip(group, encoded, strict=True):
                try:
                    items.append(self._fit(index, list(ids)))
                except InputError as error:
                    outcomes[index] = _failure(str(error))
        return items

    def _fit(self, index: int, ids: list[int]) -> _Item:
        """An input's ids within ``max_length``: cut or refused per ``truncation``."""
        limit = self.config.max_length
        if len(ids) <= limit:
            return _Item(index, ids)
        if self.config.truncation == "error":
            raise InputError(
                f"input of {len(ids)} tokens is longer than max_length={limit}; raise "
                "max_length or set truncation to 'left' (keep the end) or 'right'"
            )
        self.metrics.truncated += 1
        kept = ids[-limit:] if self.config.truncation == "left" else ids[:limit]
        where = "end" if self.config.truncation == "left" else "start"
        return _Item(index, kept, f"truncated from {len(ids)} to {limit} tokens (kept the {where})")

    def _batches(self, items: list[_Item]) -> list[list[_Item]]:
        """Items, longest first, packed so that items x longest <= max_tokens_per_batch.

        One item a batch when ``batch_invariant``, or when the model has no pad
        token (it reads the last position: no padding possible).
        """
        if self.config.batch_invariant or self._pad_id is None:
            return [[item] for item in items]
        budget = self.config.max_tokens_per_batch
        batches: list[list[_Item]] = []
        for item in sorted(items, key=lambda it: len(it.ids), reverse=True):
            if batches and (len(batches[-1]) + 1) * len(batches[-1][0].ids) <= budget:
                batches[-1].append(item)
            else:
                batches.append([item])
        return batches

    def _run(self, batch: list[_Item], outcomes: list[ModelOutcome | None]) -> None:
        """Score one batch into ``outcomes``; split it on OOM, isolate a failing item."""
        import torch

        started = time.perf_counter()
        try:
            inputs = self._prepare(batch)
            prepared = time.perf_counter()
            values = self._forward(inputs)
        except (RuntimeError, ValueError, IndexError, TypeError) as error:
            # Only text is kept: the exception's traceback holds the failed pass's tensors,
            # which must be freed before the retries below.
            out_of_memory = _is_out_of_memory(error)
            problem = f"{type(error).__name__}: {error}"
        else:
            out_of_memory, problem = False, ""
        if problem:
            if out_of_memory and self._device.startswith("cuda"):
                torch.cuda.empty_cache()
            if len(batch) > 1:
                if out_of_memory:
                    self.metrics.oom_splits += 1
                    half = len(batch) // 2
                    parts = [batch[:half], batch[half:]]
                else:
                    parts = [[item] for item in batch]
                for part in parts:
                    self._run(part, outcomes)
                return
            message = (
                f"out of memory on one input of {len(batch[0].ids)} tokens; lower max_length "
                "or use a device with more memory"
                if out_of_memory
                else f"forward pass failed: {problem}"
            )
            outcomes[batch[0].index] = _failure(message, tokens_in=len(batch[0].ids))
            return
        finished = time.perf_counter()
        elapsed = finished - started
        self.metrics.batches += 1
        self.metrics.preprocess_s += prepared - started
        self.metrics.forward_s += finished - prepared
        self.metrics.tokens += sum(len(item.ids) for item in batch)
        self.metrics.padded_tokens += len(batch) * max(len(item.ids) for item in batch)
        for item, value in zip(batch, values, strict=True):
            outcomes[item.index] = ModelOutcome(
                value=value, message=item.note, tokens_in=len(item.ids), latency_s=elapsed
            )

    def _prepare(self, batch: list[_Item]) -> dict[str, Any]:
        """A batch's model inputs on the model's device: ids padded on the right, their mask."""
        import torch

        width = max(len(item.ids) for item in batch)
        pad = self._pad_id if self._pad_id is not None else 0
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, item in enumerate(batch):
            input_ids[row, : len(item.ids)] = torch.tensor(item.ids, dtype=torch.long)
            attention_mask[row, : len(item.ids)] = 1
        return {
            "input_ids": input_ids.to(self._device),
            "attention_mask": attention_mask.to(self._device),
        }

    def _forward(self, inputs: dict[str, Any]) -> list[float]:
        """The first label's logit per row, in float32."""
        import torch

        with torch.inference_mode():
            logits = self._model(**inputs).logits
        return [float(v) for v in logits[:, 0].float().cpu().tolist()]


def _is_out_of_memory(error: BaseException) -> bool:
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    text = str(error)
    return isinstance(error, oom_type) or "out of memory" in text or "can't allocate" in text


def _failure(message: str, *, tokens_in: int = 0) -> ModelOutcome:
    """A ``model_error`` outcome with its cause."""
    return ModelOutcome(failure="model_error", message=message, tokens_in=tokens_in)
