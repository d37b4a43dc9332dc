"""Prompts in three scripts (English, CJK, code) and a real tokenizer for them, built here (no download).

The tokenizer is a byte-level BPE (as GPT-2, Llama 3 and Qwen are) trained on
text of all three scripts, with a chat template, saved to a folder and loaded
back with ``AutoTokenizer`` the way a judge model's tokenizer is: it is the
"model tokenizer" of the tokens-per-minute tests, on the server (``usage``,
``/tokenize``) and, when a test says so, on the client.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
SPECIALS = ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

_WORDS = (
    "the answer is correct because student response matches reference solution in meaning "
    "a red car parked near house two cats sit on mat while sun shines over park and river"
).split()
_HANZI = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现"
_CODE = [
    "def area(w: int, h: int) -> int:",
    "    return w * h",
    "for i in range(10):",
    "    total += values[i] ** 2",
    "if not items: raise ValueError('empty')",
    "result = {k: v for k, v in pairs if v is not None}",
    "print(json.dumps(result, indent=2))",
]

SCRIPTS = ("english", "cjk", "code")


def text(script: str, size: int, seed: int) -> str:
    """About ``size`` characters of ``script`` text, different for every seed."""
    rng = random.Random(f"{script}:{seed}")
    if script == "english":
        words: list[str] = []
        while sum(len(w) + 1 for w in words) < size:
            words.append(rng.choice(_WORDS))
        return " ".join(words) + f" ({seed})"
    if script == "cjk":
        return "".join(rng.choice(_HANZI) for _ in range(size)) + f"({seed})"
    if script == "code":
        lines: list[str] = []
        while sum(len(line) + 1 for line in lines) < size:
            lines.append(rng.choice(_CODE))
        return "\n".join(lines) + f"\n# {seed}"
    raise ValueError(f"unknown script {script!r}; expected one of {SCRIPTS}")


def messages(script: str, size: int, seed: int) -> list[dict[str, Any]]:
    """A judge's chat: fixed instructions, then the graded ``script`` text."""
    return [
        {"role": "system", "content": "Grade the answer. Output only 1.0 or 0.0."},
        {"role": "user", "content": "Answer:\n" + text(script, size, seed)},
    ]


def save_tokenizer(folder: Path) -> Path:
    """Train the byte-level BPE on all three scripts, save it to ``folder``; the folder."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [text(script, 400, seed) for script in SCRIPTS for seed in range(60)]
    trainer = trainers.BpeTrainer(
        vocab_size=1500,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


def load_tokenizer(folder: Path) -> Any:
    """The saved tokenizer, loaded the way a model's is."""
    return AutoTokenizer.from_pretrained(folder)


def tokens_endpoint(
    url: str, model: str, tokens_per_minute: float, counting: str, tokenizer_dir: Path
) -> dict[str, Any]:
    """An endpoint mapping limited to ``tokens_per_minute``, counting prompts as ``counting`` says.

    ``counting``: ``tokenizer`` (the model's, from ``tokenizer_dir``), ``endpoint``
    (the server's ``/tokenize``: the default, so no ``tokenizer`` key is written and
    revisions from before the key read the mapping too) or ``bytes``.
    """
    setting = {"tokenizer": str(tokenizer_dir), "bytes": "bytes"}.get(counting)
    return {
        "base_url": url,
        "model": model,
        "sampling": {"temperature": 0.0, "max_tokens": 8},
        "limits": {
            "tokens_per_minute": tokens_per_minute,
            **({"tokenizer": setting} if setting else {}),
        },
    }
