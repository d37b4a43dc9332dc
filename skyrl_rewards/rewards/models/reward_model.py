"""Run a Hugging Face sequence-classification reward model: one scalar per prompt and completion.

A :class:`RewardModelRunner` loads ``AutoModelForSequenceClassification`` and
its tokenizer once, from a local folder (``local_files_only``: never the
network), and scores :class:`~skyrl_rewards.rewards.contract.lanes.ModelRequest`
s of the reward-model lane. It is what a pool's reward-model worker holds, and
what :func:`run_reward_model_requests` keeps, one per endpoint, in this process.

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
is run by :class:`VisionRewardModelRunner` instead (images and text through
its processor; the model is :mod:`~skyrl_rewards.rewards.models.vl_reward_model`'s;
:func:`build_runner` picks the runner).

Scoring: inputs are sorted by length (longest first) and packed into batches
whose padded size (items x longest) stays within ``max_tokens_per_batch``;
each batch is padded on the right with the model's pad token (the model reads
the last token that is not padding, so padding changes no value). The value is
the model's raw logit, in float32; normalisation is the reward component's job.
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
from dataclasses import asdict, dataclass, field
from typing import Any

from skyrl_rewards.rewards.contract.lanes import ModelOutcome, ModelRequest
from skyrl_rewards.rewards.models.reward_model_payload import InputError, payload_messages, render

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
    forward_s: float = 0.0


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
        for batch in self._batches(self._items(requests, outcomes)):
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
        """Items, longest first, packed so that items x longest <= max_tokens_per_batch."""
        if self._pad_id is None:  # the model reads the last position: no padding possible
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
            values = self._forward(batch)
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
        elapsed = time.perf_counter() - started
        self.metrics.batches += 1
        self.metrics.forward_s += elapsed
        self.metrics.tokens += sum(len(item.ids) for item in batch)
        self.metrics.padded_tokens += len(batch) * max(len(item.ids) for item in batch)
        for item, value in zip(batch, values, strict=True):
            outcomes[item.index] = ModelOutcome(
                value=value, message=item.note, tokens_in=len(item.ids), latency_s=elapsed
            )

    def _forward(self, batch: list[_Item]) -> list[float]:
        import torch

        width = max(len(item.ids) for item in batch)
        pad = self._pad_id if self._pad_id is not None else 0
        input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
        attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, item in enumerate(batch):
            input_ids[row, : len(item.ids)] = torch.tensor(item.ids, dtype=torch.long)
            attention_mask[row, : len(item.ids)] = 1
        with torch.inference_mode():
            logits = self._model(
                input_ids=input_ids.to(self._device),
                attention_mask=attention_mask.to(self._device),
            ).logits
        return [float(v) for v in logits[:, 0].float().cpu().tolist()]


@dataclass
class _VisionItem(_Item):
    """An input with its processor outputs (one row: ids, mask, pixel patches, grids)."""

    features: dict[str, Any] = field(default_factory=dict)


class VisionRewardModelRunner(RewardModelRunner):
    """:class:`RewardModelRunner` for a vision-language classifier (Qwen2.5-VL).

    The checkpoint, its processor and the value are described in
    :mod:`~skyrl_rewards.rewards.models.vl_reward_model`. A payload's
    ``images`` (paths, or in-memory images as they are) are read, converted to
    RGB and downscaled to the judge's cap
    (:data:`~skyrl_rewards.rewards.models.judge_prompts.MAX_IMAGE_SIDE`; no
    re-encoding), then put as ``{"type": "image"}`` parts before the text of
    the last user message; the checkpoint's processor renders the chat and
    expands each image into its vision tokens. Items are processed one by one
    and batched as the text runner's (token budget over the expanded ids, OOM
    halving), padded on the right, their images' patches concatenated
    (:func:`~skyrl_rewards.rewards.models.vl_reward_model.collate`).

    An input past ``max_length`` is a failure: inputs are never cut (a cut
    could split an image's tokens), so a ``truncation`` other than ``"error"``
    is a load error naming the fix.
    """

    _needs = (
        "a vision-language reward model needs torch, transformers >= 4.52 and torchvision "
        "(its processor) where it runs"
    )
    _layout = f"{VL_ARCHITECTURE}, with its processor"

    def _load(self) -> None:
        if self.config.truncation != "error":
            self.load_error = (
                f"reward model {self.config.model!r} is a vision-language model, whose inputs "
                f"are not cut: set truncation: error (got {self.config.truncation!r}) and raise "
                "max_length if inputs are long"
            )
            return
        super()._load()

    def _from_pretrained(self, path: str, dtype: Any) -> tuple[Any, Any]:
        """The checkpoint at ``path``: its model in ``dtype`` and its processor."""
        from transformers import AutoProcessor

        from skyrl_rewards.rewards.models.vl_reward_model import (
            Qwen2_5_VLForSequenceClassification,
        )

        processor = AutoProcessor.from_pretrained(path, local_files_only=True)
        model = Qwen2_5_VLForSequenceClassification.from_pretrained(
            path, local_files_only=True, dtype=dtype
        )
        return model, processor

    def _padding(self, model: Any, tokenizer: Any) -> int | None:
        """The processor's tokenizer's pad id, else its end (rows are found by their mask)."""
        pad_id = tokenizer.tokenizer.pad_token_id
        return tokenizer.tokenizer.eos_token_id if pad_id is None else pad_id

    def _items(
        self, requests: Sequence[ModelRequest], outcomes: list[ModelOutcome | None]
    ) -> list[_Item]:
        items: list[_Item] = []
        for index, request in enumerate(requests):
            try:
                features = self._process(request.payload)
                ids = features["input_ids"][0].tolist()
                if len(ids) > self.config.max_length:
                    raise InputError(
                        f"input of {len(ids)} tokens (images included) is longer than "
                        f"max_length={self.config.max_length}; raise max_length"
                    )
            except InputError as error:
                outcomes[index] = _failure(str(error))
            else:
                items.append(_VisionItem(index, ids, features=features))
        return items

    def _process(self, payload: Any) -> dict[str, Any]:
        """One payload through the processor: a batch of one, as tensors; ``InputError`` when unreadable."""
        from jinja2 import TemplateError

        if not isinstance(payload, Mapping):
            raise InputError(f"payload: expected a mapping, got {type(payload).__name__}")
        images = [
            self._image(position, ref) for position, ref in enumerate(payload.get("images") or [])
        ]
        processor = self._tokenizer
        try:
            if "text" in payload and isinstance(payload["text"], str) and not images:
                text = payload["text"]
            else:
                messages: list[dict[str, Any]] = payload_messages(payload)
                users = [i for i, m in enumerate(messages) if m["role"] == "user"]
                if images and not users:
                    raise InputError("payload: images but no user message to put them in")
                if images:
                    last = messages[users[-1]]
                    last["content"] = [
                        *({"type": "image"} for _ in images),
                        {"type": "text", "text": last["content"]},
                    ]
                text = processor.apply_chat_template(messages, tokenize=False)
            features = processor(text=[text], images=images or None, return_tensors="pt")
        except (TemplateError, ValueError, TypeError, KeyError, IndexError) as error:
            raise InputError(f"processor: {type(error).__name__}: {error}") from error
        return dict(features)

    def _image(self, position: int, ref: Any) -> Any:
        from skyrl_rewards.rewards.models.judge_prompts import (
            MAX_IMAGE_SIDE,
            downscale,
            load_image,
        )

        field_name = f"payload.images[{position}]"
        try:
            image = load_image(ref, field_name)
        except (ValueError, OSError) as error:
            raise InputError(str(error)) from error
        return downscale(image.convert("RGB"), MAX_IMAGE_SIDE)

    def _forward(self, batch: list[_Item]) -> list[float]:
        from skyrl_rewards.rewards.models.vl_reward_model import collate, last_token_values

        rows = [item.features for item in batch if isinstance(item, _VisionItem)]
        pad = self._pad_id if self._pad_id is not None else 0
        return last_token_values(self._model, collate(rows, pad))


def _is_out_of_memory(error: BaseException) -> bool:
    import torch

    oom_type = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError
    text = str(error)
    return isinstance(error, oom_type) or "out of memory" in text or "can't allocate" in text


def _failure(message: str, *, tokens_in: int = 0) -> ModelOutcome:
    """A ``model_error`` outcome with its cause."""
    return ModelOutcome(failure="model_error", message=message, tokens_in=tokens_in)


_RUNNERS: dict[str, RewardModelRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def runner_for(key: str, config: Mapping[str, Any]) -> RewardModelRunner:
    """This process's runner for endpoint ``key``, built (the model loaded) on first use.

    A runner whose model failed to load is kept too: every later request fails
    at once with the same message instead of loading again.
    """
    with _RUNNERS_LOCK:
        runner = _RUNNERS.get(key)
        if runner is None:
            runner = _RUNNERS[key] = build_runner(RewardModelConfig.from_mapping(config))
        return runner


def build_runner(config: RewardModelConfig) -> RewardModelRunner:
    """The runner for the checkpoint at ``config.model``.

    A checkpoint whose ``config.json`` names the vision-language classifier
    (:data:`VL_ARCHITECTURE`) gets a
    :class:`VisionRewardModelRunner`;
    any other (or one whose config cannot be read: the runner then says why) a
    text :class:`RewardModelRunner`.
    """
    if _architectures(config.model) == [VL_ARCHITECTURE]:
        return VisionRewardModelRunner(config)
    return RewardModelRunner(config)


def _architectures(path: str) -> list[str]:
    """The ``architectures`` of the checkpoint's ``config.json`` (empty when it cannot be read)."""
    try:
        from transformers import PretrainedConfig

        config, _ = PretrainedConfig.get_config_dict(path, local_files_only=True)
    except (ImportError, OSError, ValueError):
        return []
    architectures = config.get("architectures")
    return list(architectures) if isinstance(architectures, list) else []


def run_reward_model_requests(
    requests: Sequence[ModelRequest], endpoints: Mapping[str, Mapping[str, Any]]
) -> list[ModelOutcome]:
    """Score reward-model requests in this process: one outcome per request, in order.

    Requests are grouped by endpoint; each endpoint's model is loaded once per
    process (:func:`runner_for`) and its requests scored in token-budget
    batches. ``endpoints`` maps each key to a :class:`RewardModelConfig` mapping.
    """
    outcomes: list[ModelOutcome | None] = [None] * len(requests)
    for key in dict.fromkeys(request.endpoint for request in requests):
        indices = [i for i, request in enumerate(requests) if request.endpoint == key]
        runner = runner_for(key, endpoints[key])
        for index, outcome in zip(
            indices, runner.score([requests[i] for i in indices]), strict=True
        ):
            outcomes[index] = outcome
    assert all(outcome is not None for outcome in outcomes)
    return outcomes  # type: ignore[return-value]
