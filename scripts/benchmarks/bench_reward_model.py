"""Reward-model throughput: the runner against a bare batched forward loop, same model, same inputs.

Run: python scripts/benchmarks/bench_reward_model.py [--items 512] [--rounds 5] [--threads 1] [--device cpu]

Target (issue 19): the runner within 1.25x of a bare loop on CPU with a tiny
random model (built here, no download). Both sides render the chat template
and tokenize every input inside the timed region; the bare loop does what a
user would write by hand (fixed-size batches in input order, the tokenizer's
own padding, one forward per batch); the runner packs length-sorted batches
by a token budget. ``bare_sorted`` is the hand-written loop with the rendered
texts sorted by length; ``forward_only`` times the forward passes alone, on
tensors built beforehand in the runner's own batches: the floor, so runner /
forward_only is the runner's whole overhead (template, tokenizer, packing,
copies). Runs are interleaved (bare, bare_sorted, forward_only, runner, ...)
and medians reported, by the wall clock and by this process's CPU time
(steadier on a shared machine: with ``--threads 1`` it counts the work done,
not the waiting); the output is one JSON line.

Served mode (``--served``, issue 29): the served reward model's client (the
pool's judge-lane machinery, in this process) against the loopback vLLM
``/classify`` server of ``tests/models/reward_model_server.py`` at a fixed
latency (``--latency-s``) serving ``--server-concurrency`` requests at once.
The client's ``max_in_flight`` is twice the server's concurrency (requests
queue at the server, as at a vLLM server with its own scheduler), so the bound
is ``concurrency x inputs per request / latency`` items a second; the target is
at least 90% of it, batching off (one input a request) and on
(``--served-batch-size``), and the local runner's figure (the tiny model on
this CPU) beside them. Run:
python scripts/benchmarks/bench_reward_model.py --served [--items 512]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import (
    AutoModelForSequenceClassification,
    AutoTokenizer,
    LlamaConfig,
    LlamaForSequenceClassification,
    PreTrainedTokenizerFast,
)

from skyrl_rewards.rewards.contract.lanes import JUDGE_LANE, REWARD_MODEL_LANE, ModelRequest
from skyrl_rewards.rewards.models.judge_client import judge_metrics, run_judge_requests
from skyrl_rewards.rewards.models.reward_model import RewardModelRunner
from skyrl_rewards.rewards.models.served_reward_model import ServedConfig

sys.path.insert(0, str(benchlib.REPO / "tests" / "models"))
from reward_model_server import RewardModelServer  # noqa: E402

CHAT_TEMPLATE = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
WORDS = (
    "the model looks at the image and counts the red objects near the left edge of the table "
    "then it answers with a number because six times seven is forty two"
).split()


def build_model(folder: Path, hidden: int, layers: int) -> None:
    """A random LlamaForSequenceClassification (one label) and a BPE tokenizer with a chat template."""
    bpe = Tokenizer(models.BPE(unk_token="[UNK]"))
    bpe.pre_tokenizer = pre_tokenizers.Whitespace()
    specials = ["[PAD]", "[UNK]", "<|user|>", "<|assistant|>", "<|end|>"]
    bpe.train_from_iterator(
        [" ".join(WORDS)] * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=specials)
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, unk_token="[UNK]", pad_token="[PAD]", eos_token="<|end|>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=1024,
        num_labels=1,
        pad_token_id=tokenizer.pad_token_id,
    )
    LlamaForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def chats(n: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` prompt + completion chats of 20 to 400 words."""
    rng = random.Random(seed)
    return [
        [
            {"role": "user", "content": " ".join(rng.choices(WORDS, k=rng.randint(10, 40)))},
            {"role": "assistant", "content": " ".join(rng.choices(WORDS, k=rng.randint(10, 360)))},
        ]
        for _ in range(n)
    ]


def bare_loop(folder: Path, device: str, batch_size: int, *, by_length: bool) -> Any:
    """A hand-written loop: template, tokenize with padding, forward, in fixed-size batches.

    ``by_length``: the rendered texts are sorted by length first (less padding;
    values returned in input order), the hand-written form of the runner's packing.
    """
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
    model.to(device).eval()

    def run(conversations: list[list[dict[str, str]]]) -> list[float]:
        rendered = [tokenizer.apply_chat_template(c, tokenize=False) for c in conversations]
        order = list(range(len(rendered)))
        if by_length:
            order.sort(key=lambda i: len(rendered[i]), reverse=True)
        values = [0.0] * len(rendered)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            encoded = tokenizer(
                [rendered[i] for i in chunk],
                padding=True,
                add_special_tokens=False,
                return_tensors="pt",
            )
            with torch.inference_mode():
                logits = model(**encoded.to(device)).logits
            for i, value in zip(chunk, logits[:, 0].float().cpu().tolist(), strict=True):
                values[i] = value
        return values

    return run


def forward_only(folder: Path, device: str, budget: int, conversations: list) -> Any:
    """Forward passes alone, on tensors built beforehand in the runner's batches (its floor)."""
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32)
    model.to(device).eval()
    ids = [
        tokenizer(tokenizer.apply_chat_template(c, tokenize=False), add_special_tokens=False)[
            "input_ids"
        ]
        for c in conversations
    ]
    batches: list[list[list[int]]] = []
    for row in sorted(ids, key=len, reverse=True):
        if batches and (len(batches[-1]) + 1) * len(batches[-1][0]) <= budget:
            batches[-1].append(row)
        else:
            batches.append([row])
    tensors = []
    for batch in batches:
        width = len(batch[0])
        input_ids = torch.full((len(batch), width), tokenizer.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, row in enumerate(batch):
            input_ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
        tensors.append((input_ids.to(device), mask.to(device)))

    def run(_: Any) -> None:
        with torch.inference_mode():
            for input_ids, mask in tensors:
                model(input_ids=input_ids, attention_mask=mask)

    return run


def served(args: argparse.Namespace, conversations: list) -> dict[str, Any]:
    """Items a second through the served client, batching off and on, against the server's bound."""
    report: dict[str, Any] = {
        "latency_s": args.latency_s,
        "server_concurrency": args.server_concurrency,
    }
    with RewardModelServer(
        latency_s=args.latency_s, max_concurrent=args.server_concurrency
    ) as server:
        for name, batch_size in (("unbatched", 1), ("batched", args.served_batch_size)):
            config = ServedConfig.from_mapping(
                {
                    "base_url": server.base_url,
                    "model": "bench-rm",
                    "api": "classify",
                    "batch_size": batch_size,
                    "batch_wait_s": 0.002,
                    "limits": {"max_in_flight": 2 * args.server_concurrency},
                }
            ).to_mapping()
            requests = [ModelRequest(JUDGE_LANE, name, {"messages": c}) for c in conversations]
            run_judge_requests(requests[: args.server_concurrency], {name: config})  # connect
            times, failures = [], 0
            for _ in range(args.rounds):
                outcomes, seconds = benchlib.timed(run_judge_requests, requests, {name: config})
                times.append(seconds)
                failures += sum(not o.ok for o in outcomes)
            metrics = judge_metrics()[name]
            per_request = metrics["items"] / metrics["batches"]
            bound = args.server_concurrency * per_request / args.latency_s
            achieved = args.items / benchlib.median(times, 6)
            report[name] = {
                "items_per_s": round(achieved, 1),
                "bound_items_per_s": round(bound, 1),
                "fraction_of_bound": round(achieved / bound, 3),
                "items_per_request": round(per_request, 2),
                "failures": failures,
                "wall_s": [round(t, 3) for t in times],
            }
        report["server_peak_arrived"] = server.peak  # counted on arrival, before the queue
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32, help="the bare loop's batch size")
    parser.add_argument(
        "--max-tokens-per-batch", type=int, default=8192, help="the runner's token budget"
    )
    parser.add_argument("--served", action="store_true", help="the served mode (see the doc)")
    parser.add_argument("--latency-s", type=float, default=0.05, help="served: server latency")
    parser.add_argument("--server-concurrency", type=int, default=4, help="served: at once")
    parser.add_argument("--served-batch-size", type=int, default=16, help="served: per request")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    conversations = chats(args.items)
    requests = [ModelRequest(REWARD_MODEL_LANE, "bench", {"messages": c}) for c in conversations]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        build_model(folder, args.hidden, args.layers)
        loops = {
            "bare": bare_loop(folder, args.device, args.batch_size, by_length=False),
            "bare_sorted": bare_loop(folder, args.device, args.batch_size, by_length=True),
            "forward_only": forward_only(
                folder, args.device, args.max_tokens_per_batch, conversations
            ),
        }
        runner = RewardModelRunner(
            {
                "model": str(folder),
                "device": args.device,
                "dtype": "float32",
                "max_length": 1024,
                "max_tokens_per_batch": args.max_tokens_per_batch,
            }
        )
        assert not runner.load_error, runner.load_error
        runs = {**loops, "runner": lambda _: runner.score(requests)}
        reference = loops["bare"](conversations)  # warm-up, and the values to compare
        outcomes = runner.score(requests)
        worst = max(abs(o.value - r) for o, r in zip(outcomes, reference, strict=True))
        loops["bare_sorted"](conversations)
        loops["forward_only"](conversations)
        wall: dict[str, list[float]] = {name: [] for name in runs}
        cpu: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, run in runs.items():
                started_cpu = time.process_time()
                wall[name].append(benchlib.timed(run, conversations)[1])
                cpu[name].append(time.process_time() - started_cpu)
    report: dict[str, Any] = {
        "items": args.items,
        "device": args.device,
        "threads": args.threads,
        "model": f"llama hidden={args.hidden} layers={args.layers}",
        "bare_batch_size": args.batch_size,
        "runner_max_tokens_per_batch": args.max_tokens_per_batch,
        "runner_items_per_batch": round(runner.metrics.requests / runner.metrics.batches, 1),
    }
    for clock, times in (("wall", wall), ("cpu", cpu)):
        medians = {name: benchlib.median(values, 6) for name, values in times.items()}
        for name, median in medians.items():
            report[f"{clock}_{name}_items_per_s"] = round(args.items / median, 1)
        for name in loops:
            report[f"{clock}_runner_time_over_{name}"] = round(medians["runner"] / medians[name], 3)
    report["wall_s"] = {name: [round(t, 2) for t in values] for name, values in wall.items()}
    report["max_abs_difference"] = worst
    if args.served:
        report["served"] = served(args, conversations)
    report["load_1min"] = benchlib.load()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
