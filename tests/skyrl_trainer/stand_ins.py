"""Stand-ins for the GPU parts of SkyRL 0.4's trainer, so one real training step runs on CPU.

Only what needs a GPU is stood in for; SkyRL's trainer, FSDP2 policy worker, optimizer,
advantages and loss, this project's experiment, generator, envs and reward pool are real.

- CUDA device calls (:func:`install_cpu_device_stand_ins`): ``torch.cuda`` calls SkyRL makes
  unguarded (``current_device``, ``set_device``, ``empty_cache``, ``synchronize``, memory
  queries) become CPU no-ops, ``Tensor.cuda()`` stays on CPU, the process group SkyRL asks
  for as ``cpu:gloo,cuda:nccl`` is gloo alone, and device meshes asked for on ``cuda`` are
  built on ``cpu``. It runs in the driver and, as Ray's
  ``worker_process_setup_hook`` (:func:`cpu_worker_setup`), in every Ray worker; the patches
  apply when torch (or the module patched) is imported, so workers that never import torch
  (the reward pool's) stay light.
- ``flash_attn.bert_padding``: SkyRL imports it at the top of ``model_wrapper.py``; flash-attn
  has no CPU wheel. The stand-in module raises if called (``trainer.remove_microbatch_padding``
  must be false on CPU, and then SkyRL never calls it).
- The inference engine (:class:`StandInEngine`, a Ray actor, and
  :class:`StandInEngineClient`, SkyRL's ``InferenceEngineInterface``): samples from its own
  copy of the policy with the model's forward, or teacher-forces a scripted reply for a
  session the test scripts (tau-bench's gold actions); logprobs come from its weights.
  For a vision-language policy (:class:`VisionStandInEngine`,
  :class:`VisionStandInEngineClient`) the engine also renders each chat with the model's own
  Hugging Face processor, as vLLM's render endpoint does (image tokens expanded, the
  processed ``pixel_values`` / ``image_grid_thw`` serialized as ``kwargs_data``), and feeds
  those pixel inputs to every forward it samples or scores with.
  :meth:`StandInEngineClient.pause_generation` / ``resume_generation`` (what SkyRL's weight
  sync calls around the transfer when the engine is not colocated, and what the fully-async
  trainer relies on to keep generating between syncs) hold new requests at the client while
  paused, as vLLM's pause does, and tell the engine, whose :meth:`StandInEngine.report` keeps
  the order of what reached it (``events``: generations, pauses, resumes, weight loads).
- The weight transfer (:func:`stand_in_build_trainer_engine`, in place of SkyRL's
  ``weight_senders.build_trainer_engine``): its ``send_weights`` iterates SkyRL's own
  ``FsdpWeightSource`` (the FSDP all-gather) and hands the gathered state dict to the engine,
  which loads it, instead of NCCL / CUDA IPC into vLLM.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

STAND_IN_URL = "stand-in-engine://"
"""``server_urls`` entries of :class:`StandInEngineClient`: the engine actor's name follows."""
NAMESPACE = "skyrl_rewards_step"


# ---- CUDA device calls -----------------------------------------------------------------------


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs ``patch(module)`` right after the module ``name`` is first executed."""

    def __init__(self, name: str, patch: Callable[[types.ModuleType], None]) -> None:
        self.name, self.patch, self.busy = name, patch, False

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != self.name or self.busy:
            return None
        self.busy = True
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            self.busy = False
        if spec is None or spec.loader is None:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module: types.ModuleType) -> None:
            exec_module(module)
            self.patch(module)

        spec.loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def _after_import(name: str, patch: Callable[[types.ModuleType], None]) -> None:
    if name in sys.modules:
        patch(sys.modules[name])
    else:
        sys.meta_path.insert(0, _AfterImport(name, patch))


def _patch_torch(torch: types.ModuleType) -> None:
    cpu = torch.device("cpu")
    cuda = torch.cuda
    cuda.current_device = lambda: cpu
    cuda.set_device = lambda device: None
    cuda.empty_cache = lambda: None
    cuda.synchronize = lambda device=None: None
    cuda.mem_get_info = lambda device=None: (0, 0)
    cuda.memory_allocated = lambda device=None: 0
    cuda.memory_reserved = lambda device=None: 0
    cuda.max_memory_allocated = lambda device=None: 0
    cuda.reset_peak_memory_stats = lambda device=None: None
    cuda.manual_seed_all = lambda seed: None
    cuda.get_rng_state = lambda device="cuda": torch.get_rng_state()
    torch.Tensor.cuda = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    _after_import("torch.distributed", _patch_process_group)


def _patch_process_group(distributed: types.ModuleType) -> None:
    real = distributed.init_process_group

    def init_process_group(*args: Any, backend: str | None = None, **kwargs: Any) -> Any:
        return real(*args, backend="gloo" if backend and "nccl" in backend else backend, **kwargs)

    distributed.init_process_group = init_process_group


def _patch_device_mesh(device_mesh: types.ModuleType) -> None:
    real = device_mesh.init_device_mesh

    def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
        return real("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

    device_mesh.init_device_mesh = init_device_mesh


def _patch_weight_senders(weight_senders: types.ModuleType) -> None:
    weight_senders.build_trainer_engine = stand_in_build_trainer_engine


def _flash_attn_stand_in() -> None:
    """``flash_attn.bert_padding`` for SkyRL's top-level import; calling it is an error."""
    if "flash_attn" in sys.modules:
        return

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "flash_attn stand-in: no CPU flash-attn; set trainer.remove_microbatch_padding=false"
        )

    package = types.ModuleType("flash_attn")
    package.__path__ = []  # a package, so the submodule import resolves from sys.modules
    # a spec without a file or version: transformers' probe reads it as "not installed"
    package.__spec__ = importlib.machinery.ModuleSpec("flash_attn", None, is_package=True)
    bert_padding = types.ModuleType("flash_attn.bert_padding")
    bert_padding.__spec__ = importlib.machinery.ModuleSpec("flash_attn.bert_padding", None)
    bert_padding.pad_input = bert_padding.unpad_input = unavailable
    package.bert_padding = bert_padding
    sys.modules["flash_attn"] = package
    sys.modules["flash_attn.bert_padding"] = bert_padding


def install_cpu_device_stand_ins() -> None:
    """Install every CPU stand-in in this process (idempotent per module)."""
    _flash_attn_stand_in()
    _after_import("torch", _patch_torch)
    _after_import("torch.distributed.device_mesh", _patch_device_mesh)
    _after_import("skyrl.backends.skyrl_train.weight_sync.weight_senders", _patch_weight_senders)


def cpu_worker_setup() -> None:
    """Ray ``worker_process_setup_hook``: the CPU stand-ins in every worker of the job."""
    install_cpu_device_stand_ins()


# ---- the inference engine --------------------------------------------------------------------


def weights_checksum(state: Mapping[str, Any]) -> str:
    """A short digest of a state dict's float32 values, by name (equal weights, equal digest)."""
    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


class StandInEngine:
    """The inference engine, on CPU: one copy of the policy, sampled with its forward.

    ``replies[session_id]`` scripts that trajectory's turns: each is teacher-forced (its
    tokens, then EOS), the others are sampled. Every response token's logprob comes from
    the engine's current weights. :meth:`load_weights` is where the weight sync lands.
    """

    auto_model = "AutoModelForCausalLM"
    """The ``transformers`` auto class the policy loads with (SkyRL's choice for it)."""

    def __init__(self, model_path: str, replies: Mapping[str, Sequence[str]], seed: int) -> None:
        import torch
        import transformers

        self.torch = torch
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model_path)
        self.model = getattr(transformers, self.auto_model).from_pretrained(
            model_path, dtype=torch.float32
        )
        self.model.eval()
        self.replies = {k: list(v) for k, v in replies.items()}
        self.generator = torch.Generator().manual_seed(seed)
        self.never_sampled: list[int] = []
        """Token ids sampling never draws (the vision engine: the image placeholders)."""
        self.synced: list[str] = []
        self.generated = {"scripted": 0, "sampled": 0}
        self.events: list[list[Any]] = []
        """What reached the engine, in order: ``["generate", session, syncs so far]``,
        ``["pause"]``, ``["resume"]``, ``["load", checksum]``."""

    def generate(
        self,
        prompt_token_ids: Sequence[Sequence[int]],
        session_ids: Sequence[Any],
        max_new_tokens: int,
        temperature: float,
        mm_features: Sequence[Any] | None = None,
    ) -> dict[str, Any]:
        """One response per prompt (``mm_features``: each prompt's rendered image features)."""
        torch = self.torch
        eos = self.tokenizer.eos_token_id
        out: dict[str, list[Any]] = {
            "responses": [],
            "response_ids": [],
            "stop_reasons": [],
            "response_logprobs": [],
        }
        features = list(mm_features) if mm_features is not None else [None] * len(session_ids)
        for prompt, session, feature in zip(prompt_token_ids, session_ids, features, strict=True):
            self.events.append(["generate", str(session), len(self.synced)])
            inputs = self._multimodal_inputs(feature)
            script = self.replies.get(str(session))
            if script:
                ids = self.tokenizer.encode(script.pop(0), add_special_tokens=False) + [eos]
                stop = "stop"
                self.generated["scripted"] += 1
            else:
                ids, stop = self._sample(list(prompt), max_new_tokens, temperature, inputs)
                self.generated["sampled"] += 1
            full = torch.tensor([list(prompt) + ids])
            with torch.no_grad():
                logits = self._logits(full, inputs, prompt_len=len(prompt))[len(prompt) - 1 : -1]
            logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None])[:, 0]
            out["responses"].append(self.tokenizer.decode(ids, skip_special_tokens=True))
            out["response_ids"].append(ids)
            out["stop_reasons"].append(stop)
            out["response_logprobs"].append(logprobs.tolist())
        return out

    def _multimodal_inputs(self, features: Any) -> dict[str, Any]:
        """The model's extra forward inputs for a prompt's rendered features (none: text)."""
        if features is not None:
            raise ValueError("stand-in engine: image features for a text-only policy")
        return {}

    def _logits(self, ids: Any, inputs: Mapping[str, Any], prompt_len: int | None = None) -> Any:
        """``[len, vocab]`` float logits of the one sequence ``ids`` (``[1, len]``), whose first
        ``prompt_len`` tokens are the prompt (None: all of it)."""
        return self.model(ids, **inputs).logits[0].float()

    def _sample(
        self, prompt: list[int], max_new_tokens: int, temperature: float, inputs: Mapping[str, Any]
    ) -> tuple[list[int], str]:
        torch = self.torch
        eos = self.tokenizer.eos_token_id
        ids: list[int] = []
        context = torch.tensor([prompt])
        with torch.no_grad():  # plain ancestral sampling: the engine's generator, reproducible
            for _ in range(max_new_tokens):
                logits = self._logits(context, inputs)[-1] / max(temperature, 1e-5)
                logits[self.never_sampled] = float("-inf")
                token = int(
                    torch.multinomial(torch.softmax(logits, -1), 1, generator=self.generator)
                )
                ids.append(token)
                if token == eos:
                    return ids, "stop"
                context = torch.cat([context, torch.tensor([[token]])], 1)
        return ids, "length"

    def load_weights(self, state: Mapping[str, Any]) -> str:
        """Load the gathered policy state dict (all keys, exact shapes); returns its checksum."""
        own = self.model.state_dict()
        missing = set(own) - set(state)
        if missing:
            raise ValueError(f"weight sync: missing {sorted(missing)[:5]}")
        self.model.load_state_dict({k: v.to(own[k].dtype) for k, v in state.items()}, strict=True)
        self.synced.append(self.checksum())
        self.events.append(["load", self.synced[-1]])
        return self.synced[-1]

    def pause(self) -> None:
        self.events.append(["pause"])

    def resume(self) -> None:
        self.events.append(["resume"])

    def checksum(self) -> str:
        return weights_checksum(self.model.state_dict())

    def report(self) -> dict[str, Any]:
        return {
            "synced": list(self.synced),
            "generated": dict(self.generated),
            "events": list(self.events),
        }


class VisionStandInEngine(StandInEngine):
    """:class:`StandInEngine` for a vision-language policy, with the model's own processor.

    :meth:`render` does what vLLM's ``/v1/chat/completions/render`` does for SkyRL's VLM
    generator: the processor's chat template, its image processor on each ``image_url`` part
    (a data URI), ``<|image_pad|>`` repeated once per merged patch, and each image's
    ``pixel_values`` / ``image_grid_thw`` serialized as vLLM's ``kwargs_data``. Sampling and
    logprobs run the model's forward on those pixel inputs, with the image-token mask SkyRL's
    policy forward builds (``mm_token_type_ids``).
    """

    auto_model = "AutoModelForImageTextToText"

    def __init__(self, model_path: str, replies: Mapping[str, Sequence[str]], seed: int) -> None:
        from transformers import AutoProcessor

        super().__init__(model_path, replies, seed)
        self.processor = AutoProcessor.from_pretrained(model_path)
        self.rendered_images = 0
        # a sampled <|image_pad|> would count as an image token in the forward's mask and break
        # the features-to-tokens match (a random tiny policy draws one in a few percent of
        # samples); a trained model never writes one, and vLLM never reads one as an image
        config = self.model.config
        self.never_sampled = [
            int(getattr(config, name))
            for name in ("image_token_id", "video_token_id")
            if getattr(config, name, None) is not None
        ]

    def render(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """``{"token_ids", "features"}`` of the chat with a generation prompt, as vLLM renders it."""
        from skyrl_helpers import message_images, serialized_image_features

        images = message_images(messages)
        text = self.processor.apply_chat_template(  # it rewrites image_url parts in place
            copy.deepcopy(list(messages)), add_generation_prompt=True, tokenize=False
        )
        if not images:
            return {
                "token_ids": self.tokenizer.encode(text, add_special_tokens=False),
                "features": None,
            }
        encoded = self.processor(text=[text], images=images, return_tensors="pt")
        ids = encoded["input_ids"][0].tolist()
        grids = encoded["image_grid_thw"]
        per_image = encoded["pixel_values"].split(grids.prod(-1).tolist())
        image_token = self.model.config.image_token_id
        starts = [i for i, t in enumerate(ids) if t == image_token and (i == 0 or ids[i - 1] != t)]
        merge = self.processor.image_processor.merge_size
        self.rendered_images += len(images)
        return {
            "token_ids": ids,
            "features": {
                "kwargs_data": {
                    "image": [
                        serialized_image_features(pixels, grid)
                        for pixels, grid in zip(per_image, grids, strict=True)
                    ]
                },
                "mm_placeholders": {
                    "image": [
                        {"offset": start, "length": int(grid.prod()) // merge**2}
                        for start, grid in zip(starts, grids, strict=True)
                    ]
                },
            },
        }

    def _multimodal_inputs(self, features: Any) -> dict[str, Any]:
        from skyrl.backends.renderer import decode_mm_kwargs

        decoded = decode_mm_kwargs((features or {}).get("kwargs_data"))
        if decoded["pixel_values"] is None:
            return {}
        return {
            "pixel_values": decoded["pixel_values"],
            "image_grid_thw": decoded["image_grid_thw"],
        }

    def _logits(self, ids: Any, inputs: Mapping[str, Any], prompt_len: int | None = None) -> Any:
        """The forward on the prompt's image slots only. vLLM fills image slots where its render
        put them; a placeholder token in a scripted response is text to it, where the HF model
        would count it as a slot and refuse the features. It goes in as the pad token: its own
        logprob is exact, those after it approximate, and the generator's guard drops that
        trajectory's logprobs with it (:class:`ImagePlaceholderInResponseError`)."""
        if inputs and prompt_len is not None:
            response = ids[:, prompt_len:]
            written = self.torch.isin(response, self.torch.tensor(self.never_sampled))
            if written.any():
                ids = ids.clone()
                ids[:, prompt_len:] = response.masked_fill(written, self.tokenizer.pad_token_id)
        if inputs:
            token_types = (ids == self.model.config.image_token_id).long()
            inputs = {**inputs, "mm_token_type_ids": token_types}
        return self.model(ids, **inputs).logits[0].float()

    def report(self) -> dict[str, Any]:
        return {**super().report(), "rendered_images": self.rendered_images}


class StandInEngineClient:
    """SkyRL's ``InferenceEngineInterface`` over the :class:`StandInEngine` actor ``name``.

    Picklable (SkyRL hands it to the policy workers): it holds the actor's name, not its
    handle (and not its pause state, which lives in the process that pauses). While paused,
    :meth:`generate` waits (at most :attr:`PAUSE_LIMIT_S`) before sending. Other lifecycle
    calls (sleep, wake, prefix cache) are no-ops: a CPU engine holds no GPU memory to free.
    """

    data_parallel_size = 1
    PAUSE_LIMIT_S = 300.0

    def __init__(self, name: str, tokenizer: Any, *, max_new_tokens: int, temperature: float):
        self.name = name
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.server_urls = [STAND_IN_URL + name]
        self.weight_version = 0
        self._resumed: asyncio.Event | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_resumed": None}

    def _running(self) -> asyncio.Event:
        if self._resumed is None:
            self._resumed = asyncio.Event()
            self._resumed.set()
        return self._resumed

    @property
    def model_name(self) -> str:
        return "stand-in-policy"

    def _engine(self) -> Any:
        import ray

        return ray.get_actor(self.name, namespace=NAMESPACE)

    async def generate(self, input_batch: Mapping[str, Any], model: str | None = None) -> dict:
        try:
            await asyncio.wait_for(self._running().wait(), self.PAUSE_LIMIT_S)
        except TimeoutError:
            raise RuntimeError(
                f"stand-in engine: paused for over {self.PAUSE_LIMIT_S} s; a weight sync "
                "paused generation and never resumed it"
            ) from None
        params = input_batch.get("sampling_params") or {}
        out = await self._engine().generate.remote(
            input_batch["prompt_token_ids"],
            input_batch["session_ids"],
            int(params.get("max_tokens") or self.max_new_tokens),
            float(params.get("temperature", self.temperature)),
            input_batch.get("mm_features"),
        )
        return {**out, "prompt_logprobs": None, "rollout_expert_indices": None}

    async def render_chat_completion(self, request_payload: Mapping[str, Any]) -> dict:
        messages = request_payload["json"]["messages"]
        ids = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=True, return_dict=False
        )
        return {"token_ids": ids, "features": None}

    async def get_world_size(self) -> tuple[int, int]:
        return 1, 1

    def increment_weight_version(self) -> None:
        self.weight_version += 1

    async def finish_session(self, session_id: str) -> None:
        pass

    async def wake_up(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def sleep(self, *args: Any, **kwargs: Any) -> None:
        pass

    async def is_sleeping(self) -> bool:
        return False

    async def pause_generation(self) -> None:
        self._running().clear()
        await self._engine().pause.remote()

    async def resume_generation(self) -> None:
        await self._engine().resume.remote()
        self._running().set()

    async def reset_prefix_cache(self, reset_running_requests: bool = False) -> None:
        pass

    async def teardown(self) -> None:
        pass

    def get_endpoint_url(self) -> str:
        raise NotImplementedError("the stand-in engine serves no HTTP endpoint")

    async def chat_completion(self, request_payload: Mapping[str, Any]) -> dict:
        raise NotImplementedError("the stand-in engine serves no chat completions")

    async def completion(self, request_payload: Mapping[str, Any]) -> dict:
        raise NotImplementedError("the stand-in engine serves no completions")

    async def update_named_weights(self, request: Any) -> None:
        raise NotImplementedError("weights reach the stand-in engine through its weight sync")

    async def load_lora_adapter(self, lora_name: str, lora_path: str) -> dict:
        raise NotImplementedError("the stand-in engine has no LoRA")


class VisionStandInEngineClient(StandInEngineClient):
    """:class:`StandInEngineClient` over a :class:`VisionStandInEngine`: the engine renders chats."""

    async def render_chat_completion(self, request_payload: Mapping[str, Any]) -> dict:
        return await self._engine().render.remote(request_payload["json"]["messages"])


# ---- the weight transfer ---------------------------------------------------------------------


class StandInTrainerEngine:
    """Trainer side of the weight sync: gather the policy (SkyRL's source), hand it over.

    Every rank iterates the source (the FSDP all-gather is a collective); rank 0 sends the
    full state dict to the engine actor and records the checksum the engine reports.
    """

    skyrl_handles_prefix_cache_reset = True
    skyrl_force_disable_expandable_segments = False
    skyrl_empty_cache_after_send = False
    skyrl_draft_source = None

    def __init__(self, source: Any, engine_name: str, rank: int) -> None:
        self.source, self.engine_name, self.rank = source, engine_name, rank

    def send_weights(self) -> None:
        import ray

        state = {name: tensor.cpu() for name, tensor in self.source}
        if self.rank == 0:
            engine = ray.get_actor(self.engine_name, namespace=NAMESPACE)
            ray.get(engine.load_weights.remote(state))

    def shutdown(self) -> None:
        pass


def stand_in_build_trainer_engine(
    *,
    source_factory: Callable[[Any, str], Any],
    rank: int,
    server_urls: Sequence[str],
    **unused: Any,
) -> StandInTrainerEngine:
    """In place of SkyRL's ``build_trainer_engine``: float32 source, engine named by the URL."""
    import torch

    (url,) = server_urls
    if not url.startswith(STAND_IN_URL):
        raise ValueError(f"stand-in weight sync: {url!r} is not a stand-in engine")
    source = source_factory(torch.float32, "stand_in")
    return StandInTrainerEngine(source, url[len(STAND_IN_URL) :], rank)
