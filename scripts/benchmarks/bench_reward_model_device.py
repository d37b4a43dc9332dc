"""Reward-model runners on a device: items/s, fraction of peak, the floor, the bare loop, budgets, spread.

Run on a GPU, from the checkout's root (any Python with torch, torchvision and transformers):
PYTHONPATH=. python3 scripts/benchmarks/bench_reward_model_device.py [--models qwen2-1.5b,qwen2-7b,qwen2.5-vl-3b]
On CPU, small shapes: .venv-skyrl/bin/python scripts/benchmarks/bench_reward_model_device.py --device cpu --small

The models are issue 46's: sequence classifiers of Qwen2-1.5B and Qwen2-7B
shapes (1.31B and 6.53B parameters without the embedding) and a Qwen2.5-VL-3B
shaped ``Qwen2_5_VLForSequenceClassification`` (3.44B), random weights (seed
0) built on the device (no download, nothing saved: the runner is given the model
built in memory), with a word-level tokenizer (one token a word); the VL
model's processor is that tokenizer with Qwen's vision tokens and a chat
template of its kind, beside the Qwen2.5-VL image processor with its default
pixel bounds, saved to a temporary folder and loaded back as the runner loads
a checkpoint's (``vl_reward_model.fast_processor``: the torchvision image
processor). Nothing beyond torch, torchvision and transformers is imported
(not TRL, not the tests' helpers), so it runs in a GPU machine's stock
PyTorch image. ``--small`` swaps in tiny shapes, fewer items and smaller
images. The score head is drawn with std ``hidden**-0.5``, so values
are of order 1, as a trained reward model's. The work: text, ``--items`` chats of lognormal lengths (mean
about 370 tokens, at most 1,500); VL, ``--vl-items`` rows, each with one image
of four sizes (448x448, 1024x768, 1280x720, 640x1280) and an answer of up to
300 words.

Per model, each timed ``--rounds`` times after a warm-up, medians:

- ``runner``: the project's runner at its default budget (``RewardModelRunner``
  or ``VisionRewardModelRunner``), template, tokenizer and image processing
  included; its ``preprocess_share`` is the runner's own ``preprocess_s`` over
  ``preprocess_s + forward_s`` (on CUDA the image processing is synchronised),
  ``forward_share`` the rest; for the VL model ``images_per_image_call`` (the
  images of a batch go through the image processor in one call);
- ``floor``: the model's forward passes alone on the runner's own batches,
  inputs built beforehand (the runner's ``_prepare``): runner / floor is the
  runner's whole overhead;
- ``bare``: a hand-written loop, batches of ``--bare-batch`` in input order,
  the tokenizer's (processor's) own padding;
- ``batch_invariant``: the runner with ``batch_invariant: true`` (one input a
  pass) on the first ``--spread-items`` items, and its cost: its time over the
  default runner's on the same items (``batch_invariant_slowdown``);
- ``budgets``: the runner at each of ``--budgets`` (text models);
- ``spread``: the largest ``|value - single|`` over the first
  ``--spread-items`` items, ``single`` an unpadded forward of the item alone,
  for the default runner and for ``batch_invariant``, beside the largest
  ``|value|``.

Fraction of peak: ``2 x parameters (without the embedding) x tokens``
(vision parameters x image patches for the VL tower) a second over
``--peak-tflops``: the datasheet's bf16 dense figure on an H100/H200 (989),
else this device's own rate on a square matrix product in the run's dtype
(``matmul_tflops``, measured here: a CPU's "peak"); ``peak_source`` says
which. The output is one JSON line.

Device time: each side runs ``--rounds`` + 1 times, the budget sweep too;
with little time on a GPU, use ``--rounds 1`` and fewer ``--items`` or
``--budgets`` for the 7B (docs/reward_models.md gives the check that fits in
eight minutes).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import random
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import benchlib
import torch
import transformers

from skyrl_rewards.rewards.contract.lanes import REWARD_MODEL_LANE, ModelRequest
from skyrl_rewards.rewards.models.reward_model import RewardModelRunner, RunnerMetrics

WORDS = (
    "where is the cat ? the cat sits on a mat in the park while the sun shines "
    "reasoning about the picture answer"
).split()
TEXT_SHAPES = {
    "qwen2-1.5b": {
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
    },
    "qwen2-7b": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
    },
}
SMALL_TEXT = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}
VL_TEXT = {
    "hidden_size": 2048,
    "intermediate_size": 11008,
    "num_hidden_layers": 36,
    "num_attention_heads": 16,
    "num_key_value_heads": 2,
    "mrope_section": [16, 24, 24],
}
VL_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "fullatt_block_indexes": [7, 15, 23, 31],
}
SMALL_VL_TEXT = {**SMALL_TEXT, "mrope_section": [2, 3, 3]}
SMALL_VL_VISION = {"depth": 2, "hidden_size": 64, "intermediate_size": 128, "num_heads": 4}
SMALL_VL_VISION["fullatt_block_indexes"] = [1]
IMAGE_SIZES = [(448, 448), (1024, 768), (1280, 720), (640, 1280)]
SMALL_IMAGE_SIZES = [(112, 112), (256, 192), (320, 180), (160, 320)]
SMALL_PIXELS = {"min_pixels": 56 * 56, "max_pixels": 256 * 28 * 28}
PEAKS = {"H100": 989.0, "H200": 989.0}
"""bf16 dense TFLOP/s by device name."""
VL_SPECIALS = [
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VL_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }} "
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for part in m['content'] %}"
    "{% if part['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% else %}{{ part['text'] }}{% endif %}{% endfor %}{% endif %} <|im_end|>{% endfor %}"
)
"""A Qwen-style chat template: an image part is Qwen2.5-VL's vision-start, pad, vision-end."""


def word_tokenizer() -> Any:
    """A word-level tokenizer (one token a word) with a chat template and a pad token."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["[PAD]", "[UNK]", "<|user|>", "<|assistant|>", "<|end|>"]
    vocab = {token: i for i, token in enumerate(specials + sorted(set(WORDS)))}
    core = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|end|>"
    )
    tokenizer.chat_template = (
        "{% for m in messages %}<|{{ m['role'] }}|> {{ m['content'] }} <|end|>{% endfor %}"
    )
    return tokenizer


def vl_processor(folder: Path, small: bool) -> Any:
    """A Qwen2.5-VL processor over :func:`word_tokenizer` (Qwen's vision tokens added), as the runner loads it.

    Saved to ``folder`` and read back with ``vl_reward_model.fast_processor``:
    the image processor is the torchvision one, as in the runner.
    """
    from transformers import Qwen2_5_VLProcessor, Qwen2VLImageProcessor, Qwen2VLVideoProcessor

    from skyrl_rewards.rewards.models.vl_reward_model import fast_processor

    tokenizer = word_tokenizer()
    tokenizer.add_tokens(VL_SPECIALS, special_tokens=True)
    tokenizer.chat_template = VL_TEMPLATE
    Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(**(SMALL_PIXELS if small else {})),
        tokenizer=tokenizer,
        video_processor=Qwen2VLVideoProcessor(),
        chat_template=VL_TEMPLATE,
    ).save_pretrained(folder)
    return fast_processor(str(folder))


def matmul_tflops(device: str, dtype: torch.dtype) -> float:
    """This device's TFLOP/s on a square matrix product in ``dtype`` (the median of five)."""
    size = 8192 if device.startswith("cuda") else 1024
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    seconds = timed_rounds(lambda: a @ b, 5, synchronized(device))
    return round(2.0 * size**3 / max(seconds, 1e-9) / 1e12, 4)


def lengths(count: int, rng: random.Random, small: bool) -> list[int]:
    """Answer lengths in words: lognormal, mean about 360, 20 to 1,480 (a tenth with ``small``)."""
    made = [min(1480, max(20, round(rng.lognormvariate(math.log(300), 0.6)))) for _ in range(count)]
    return [max(2, n // 10) for n in made] if small else made


def chat(rng: random.Random, words: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": " ".join(rng.choices(WORDS, k=12))},
        {"role": "assistant", "content": " ".join(rng.choices(WORDS, k=words))},
    ]


def value_scale(score: torch.nn.Linear, hidden: int) -> None:
    """Score weights of std ``hidden**-0.5``: values of order 1 (a trained reward model's), so a
    spread is measured against values of a real size, not the random init's hundredths."""
    with torch.no_grad():
        torch.nn.init.normal_(score.weight, std=hidden**-0.5)


def in_memory(runner_class: type, model: Any, tokenizer: Any, config: dict[str, Any]) -> Any:
    """``runner_class`` given a model built here instead of one read from a folder."""

    class Built(runner_class):  # type: ignore[misc, valid-type]
        def _from_pretrained(self, path: str, dtype: Any) -> tuple[Any, Any]:
            return model, tokenizer

    runner = Built({"model": "in-memory", **config})
    if runner.load_error:
        raise SystemExit(runner.load_error)
    return runner


def synchronized(device: str) -> Callable[[], None]:
    return (lambda: torch.cuda.synchronize(device)) if device.startswith("cuda") else lambda: None


def timed_rounds(run: Callable[[], Any], rounds: int, sync: Callable[[], None]) -> float:
    """The median wall time of ``rounds`` calls after one warm-up."""
    run()
    times = []
    for _ in range(rounds):
        sync()
        started = time.perf_counter()
        run()
        sync()
        times.append(time.perf_counter() - started)
    return benchlib.median(times, 4)


def floor(runner: RewardModelRunner, requests: list[ModelRequest]) -> Callable[[], None]:
    """The runner's forward passes alone, on its own batches built beforehand."""
    outcomes: list[Any] = [None] * len(requests)
    batches = runner._batches(runner._items(requests, outcomes))
    inputs = [runner._prepare(batch) for batch in batches]

    def run() -> None:
        for batch in inputs:
            runner._forward(batch)

    return run


def spread(values: list[float], single: list[float]) -> float:
    return round(max(abs(a - b) for a, b in zip(values, single, strict=True)), 6)


def measure(
    name: str,
    build: Callable[[dict[str, Any]], RewardModelRunner],
    requests: list[ModelRequest],
    bare: Callable[[], Any],
    single: Callable[[ModelRequest], float],
    flops: Callable[[float], float],
    budgets: list[int],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The figures every model shares (see the module doc)."""
    runner, invariant = build({}), build({"batch_invariant": True})
    sync = synchronized(runner.device)
    runner.score(requests[:4])  # warm-up
    runner.metrics = RunnerMetrics()
    runner_s = timed_rounds(lambda: runner.score(requests), args.rounds, sync)
    metrics, per_round = dataclasses.replace(runner.metrics), args.rounds + 1
    tokens = metrics.tokens / per_round
    work = flops(tokens)
    floor_s = timed_rounds(floor(runner, requests), args.rounds, sync)
    bare_s = timed_rounds(bare, args.rounds, sync)
    subset = requests[: args.spread_items]
    invariant_s = timed_rounds(lambda: invariant.score(subset), args.rounds, sync)
    subset_s = timed_rounds(lambda: runner.score(subset), args.rounds, sync)
    singles = [single(request) for request in subset]
    fast = [o.value for o in runner.score(requests)[: len(subset)]]
    alone = [o.value for o in invariant.score(subset)]
    report: dict[str, Any] = {
        "items": len(requests),
        "tokens": round(tokens),
        "padded_tokens": round(metrics.padded_tokens / per_round),
        "batches": round(metrics.batches / per_round, 1),
        "runner_s": runner_s,
        "runner_items_per_s": round(len(requests) / runner_s, 1),
        "runner_tokens_per_s": round(tokens / runner_s),
        "preprocess_share": round(
            metrics.preprocess_s / (metrics.preprocess_s + metrics.forward_s), 3
        ),
        "forward_share": round(metrics.forward_s / (metrics.preprocess_s + metrics.forward_s), 3),
        "floor_s": floor_s,
        "runner_over_floor": round(runner_s / floor_s, 3),
        "bare_s": bare_s,
        "bare_over_runner": round(bare_s / runner_s, 3),
        "batch_invariant_items_per_s": round(len(subset) / invariant_s, 1),
        "batch_invariant_slowdown": round(invariant_s / subset_s, 2),
        "spread_items": len(subset),
        "spread_runner": spread(fast, singles),
        "spread_batch_invariant": spread(alone, singles),
        "max_abs_value": round(max(abs(v) for v in singles), 4),
    }
    if metrics.image_calls:
        report["images_per_image_call"] = round(metrics.images / metrics.image_calls, 1)
    if args.peak_tflops:
        for side in ("runner", "floor"):
            report[f"{side}_fraction_of_peak"] = round(
                work / report[f"{side}_s"] / (args.peak_tflops * 1e12), 4
            )
    report["budget_s"] = {
        str(budget): timed_rounds(
            partial(build({"max_tokens_per_batch": budget}).score, requests), args.rounds, sync
        )
        for budget in budgets
    }
    print(f"{name}: {report}", file=sys.stderr)
    return report


def text_classifier(
    name: str, tokenizer: Any, small: bool, device: str, dtype: torch.dtype
) -> tuple[Any, int]:
    """The Qwen2-shaped sequence classifier ``name`` (random, on ``device``) and its parameters
    without the embedding."""
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    shape = SMALL_TEXT if small else TEXT_SHAPES[name]
    config = Qwen2Config(
        **shape,
        vocab_size=len(tokenizer) if small else 151936,
        max_position_embeddings=4096,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForSequenceClassification._from_config(config, dtype=dtype).eval()
    value_scale(model.score, shape["hidden_size"])
    parameters = (
        sum(p.numel() for p in model.parameters()) - model.model.embed_tokens.weight.numel()
    )
    return model, parameters


def text_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    tokenizer = word_tokenizer()
    model, parameters = text_classifier(
        name, tokenizer, args.small, args.device, getattr(torch, args.dtype)
    )
    rng = random.Random(0)
    chats = [chat(rng, n) for n in lengths(args.items, rng, args.small)]
    requests = [ModelRequest(REWARD_MODEL_LANE, name, {"messages": c}) for c in chats]
    settings = {"device": args.device, "dtype": args.dtype}

    def bare() -> None:
        for start in range(0, len(chats), args.bare_batch):
            texts = [
                tokenizer.apply_chat_template(c, tokenize=False)
                for c in chats[start : start + args.bare_batch]
            ]
            encoded = tokenizer(texts, padding=True, add_special_tokens=False, return_tensors="pt")
            with torch.inference_mode():
                model(**encoded.to(args.device)).logits.float().cpu()

    def single(request: ModelRequest) -> float:
        text = tokenizer.apply_chat_template(request.payload["messages"], tokenize=False)
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.inference_mode():
            return float(model(input_ids=ids.to(args.device)).logits[0, 0].float())

    report = measure(
        name,
        lambda extra: in_memory(RewardModelRunner, model, tokenizer, {**settings, **extra}),
        requests,
        bare,
        single,
        lambda tokens: 2.0 * parameters * tokens,
        args.budgets,
        args,
    )
    report["parameters_without_embedding"] = parameters
    return report


def vl_model(name: str, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="bench_vl_processor_") as folder:
        processor = vl_processor(Path(folder), args.small)
    return vl_measure(name, processor, args)


def vl_classifier(
    processor: Any, small: bool, device: str, dtype: torch.dtype
) -> tuple[Any, int, int]:
    """The Qwen2.5-VL-3B-shaped ``Qwen2_5_VLForSequenceClassification`` over ``processor``'s
    tokens (random, on ``device``), its language parameters without the embedding and its
    vision tower's."""
    from transformers import Qwen2_5_VLConfig

    from skyrl_rewards.rewards.models.vl_reward_model import Qwen2_5_VLForSequenceClassification

    tokenizer = processor.tokenizer
    text = dict(SMALL_VL_TEXT if small else VL_TEXT)
    rope = {"rope_type": "default", "mrope_section": text.pop("mrope_section"), "rope_theta": 1e6}
    vision = SMALL_VL_VISION if small else VL_VISION
    tokens = {
        f"{token}_token_id": tokenizer.convert_tokens_to_ids(f"<|{token}|>")
        for token in ("vision_start", "vision_end")
    }
    tokens |= {
        "image_token_id": processor.image_token_id,
        "video_token_id": processor.video_token_id,
    }
    config = Qwen2_5_VLConfig(
        text_config={
            **text,
            "vocab_size": len(tokenizer) if small else 151936,
            "max_position_embeddings": 32768,
            "rope_parameters": rope,
            "bos_token_id": None,
            "eos_token_id": tokenizer.eos_token_id,
            "pad_token_id": tokenizer.pad_token_id,
        },
        vision_config={**vision, "out_hidden_size": text["hidden_size"]},
        num_labels=1,
        **tokens,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2_5_VLForSequenceClassification._from_config(config, dtype=dtype).eval()
    value_scale(model.score, text["hidden_size"])
    visual = sum(p.numel() for p in model.model.visual.parameters())
    embedding = model.model.language_model.embed_tokens.weight.numel()
    language = sum(p.numel() for p in model.parameters()) - visual - embedding
    return model, language, visual


def vl_measure(name: str, processor: Any, args: argparse.Namespace) -> dict[str, Any]:
    from PIL import Image

    from skyrl_rewards.rewards.models.vl_runner import VisionRewardModelRunner

    model, language, visual = vl_classifier(
        processor, args.small, args.device, getattr(torch, args.dtype)
    )
    sizes = SMALL_IMAGE_SIZES if args.small else IMAGE_SIZES
    images = [
        Image.effect_mandelbrot(size, (-2.0, -1.5, 1.0, 1.5), 60 + 10 * i).convert("RGB")
        for i, size in enumerate(sizes)
    ]
    rng = random.Random(0)
    rows = [
        {
            "messages": chat(rng, rng.randint(3, 30) if args.small else rng.randint(20, 300)),
            "images": [images[i % len(images)]],
        }
        for i in range(args.vl_items)
    ]
    requests = [ModelRequest(REWARD_MODEL_LANE, name, row) for row in rows]
    settings = {"device": args.device, "dtype": args.dtype, "max_length": 32768}

    def build(extra: dict[str, Any]) -> RewardModelRunner:
        return in_memory(VisionRewardModelRunner, model, processor, {**settings, **extra})

    image_tokens_per_patch = processor.image_processor.merge_size**2

    def rendered(row: dict[str, Any]) -> str:
        user, answer = row["messages"]
        parts = [{"type": "image"}, {"type": "text", "text": user["content"]}]
        return processor.apply_chat_template(
            [{"role": "user", "content": parts}, answer], tokenize=False
        )

    def bare() -> None:
        for start in range(0, len(rows), args.bare_batch):
            chunk = rows[start : start + args.bare_batch]
            inputs = processor(
                text=[rendered(row) for row in chunk],
                images=[row["images"][0] for row in chunk],
                padding=True,
                padding_side="right",
                return_tensors="pt",
            )
            with torch.inference_mode():
                model(**inputs.to(args.device)).float().cpu()

    def single(request: ModelRequest) -> float:
        inputs = processor(
            text=[rendered(request.payload)],
            images=request.payload["images"],
            return_tensors="pt",
            device=args.device,  # the image processing on the runner's device, as the runner's
        )
        with torch.inference_mode():
            return float(model(**inputs.to(args.device))[0, 0].float())

    outcomes: list[Any] = [None] * len(requests)
    items = build({})._items(requests, outcomes)
    # an image token is merge_size**2 patches; the vision tower runs on every patch
    patches = sum(n for item in items for n in item.image_tokens) * image_tokens_per_patch
    report = measure(
        name,
        build,
        requests,
        bare,
        single,
        lambda tokens: 2.0 * (language * tokens + visual * patches),
        args.vl_budgets,
        args,
    )
    report.update(
        parameters_language=language,
        parameters_vision=visual,
        image_patches=patches,
    )
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default=None, help="default: bfloat16 on CUDA, else float32")
    parser.add_argument("--small", action="store_true", help="tiny shapes and work (CPU)")
    parser.add_argument(
        "--models", default=None, help="default: all three (small: qwen2-1.5b,qwen2.5-vl-3b)"
    )
    parser.add_argument("--items", type=int, default=None, help="text chats (1,024; small 128)")
    parser.add_argument("--vl-items", type=int, default=None, help="VL rows (64; small 16)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--bare-batch", type=int, default=32, help="the bare loop's batch size (VL: a quarter)"
    )
    parser.add_argument("--spread-items", type=int, default=None, help="(64; small 16)")
    parser.add_argument("--budgets", default="4096,16384,65536,262144")
    parser.add_argument("--vl-budgets", default="16384,65536")
    parser.add_argument("--peak-tflops", type=float, default=None)
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (CPU: 1; CUDA: torch's)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="also write the report here after each model (kept on a timeout)",
    )
    args = parser.parse_args()
    if args.threads or not args.device.startswith("cuda"):
        torch.set_num_threads(args.threads or 1)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    models = "qwen2-1.5b,qwen2.5-vl-3b" if args.small else "qwen2-1.5b,qwen2-7b,qwen2.5-vl-3b"
    args.models = args.models or models  # small shapes are the same for both text models
    args.items = args.items or (128 if args.small else 1024)
    args.vl_items = args.vl_items or (16 if args.small else 64)
    args.spread_items = args.spread_items or (16 if args.small else 64)
    args.budgets = [int(b) for b in args.budgets.split(",")]
    args.vl_budgets = [int(b) for b in args.vl_budgets.split(",")]
    if args.small:
        args.budgets = [b // 16 for b in args.budgets]
        args.vl_budgets = [b // 16 for b in args.vl_budgets]
    device_name = (
        torch.cuda.get_device_name(args.device) if args.device.startswith("cuda") else "cpu"
    )
    matmul = matmul_tflops(args.device, getattr(torch, args.dtype))
    peak_source = "given"
    if args.peak_tflops is None:
        args.peak_tflops = next((p for key, p in PEAKS.items() if key in device_name), None)
        peak_source = "datasheet, bf16 dense"
    if args.peak_tflops is None:
        args.peak_tflops, peak_source = matmul, "matmul_tflops (measured here)"
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
        "device": device_name,
        "dtype": args.dtype,
        "small": args.small,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peak_tflops": args.peak_tflops,
        "peak_source": peak_source,
        "matmul_tflops": matmul,
        "threads": torch.get_num_threads(),
        "load_1min_start": benchlib.load(),
    }
    for name in args.models.split(","):
        if name.startswith("qwen2.5-vl"):
            vl_args = argparse.Namespace(
                **{**vars(args), "bare_batch": max(1, args.bare_batch // 4)}
            )
            report[name] = vl_model(name, vl_args)
        else:
            report[name] = text_model(name, args)
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        report["load_1min_end"] = benchlib.load()
        if args.out:
            Path(args.out).write_text(json.dumps(report) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
