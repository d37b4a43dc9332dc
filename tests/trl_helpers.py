"""A tiny policy, its GRPO settings and a fixed-answer rollout for tests in TRL's ``GRPOTrainer``.

Shared by ``tests/test_trl.py`` (the project venv) and
``tests/skyrl_trainer/test_vl_reward_model.py`` (the SkyRL venv, which puts
``tests/`` on ``sys.path``); both venvs have TRL. Nothing is downloaded: the
policy is a random one-layer Qwen2 over the test's own tokenizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedTokenizerBase, Qwen2Config, Qwen2ForCausalLM
from trl import GRPOConfig


def tiny_config(tokenizer: PreTrainedTokenizerBase, **fields: Any) -> Qwen2Config:
    """A one-layer Qwen2 of hidden size 16 over ``tokenizer``'s vocabulary (``fields`` added)."""
    settings: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "max_position_embeddings": 256,
        "pad_token_id": tokenizer.pad_token_id,
    }
    return Qwen2Config(**(settings | fields))


def tiny_model(tokenizer: PreTrainedTokenizerBase) -> Qwen2ForCausalLM:
    """:func:`tiny_config`'s causal LM, ending at the tokenizer's end token, seeded (seed 0)."""
    torch.manual_seed(0)
    return Qwen2ForCausalLM(tiny_config(tokenizer, eos_token_id=tokenizer.eos_token_id))


def grpo_args(output_dir: Path, **overrides: Any) -> GRPOConfig:
    """CPU GRPO settings: one group of four completions of up to 12 tokens, 2 steps, no KL term."""
    settings: dict[str, Any] = {
        "output_dir": str(output_dir),
        "per_device_train_batch_size": 4,
        "num_generations": 4,
        "max_completion_length": 12,
        "max_steps": 2,
        "logging_steps": 1,
        "learning_rate": 1e-3,
        "beta": 0.0,
        "report_to": "none",
        "use_cpu": True,
        "save_strategy": "no",
        "disable_tqdm": True,
        "seed": 0,
    }
    return GRPOConfig(**(settings | overrides))


def fixed_rollout(
    tokenizer: PreTrainedTokenizerBase, answers: Sequence[str]
) -> Callable[[list[Any], Any], dict[str, list]]:
    """A TRL ``rollout_func`` that answers the i-th copy of each prompt with ``answers[i % len]``."""

    def rollout(prompts: list[Any], trainer: Any) -> dict[str, list]:
        prompt_ids, completion_ids = [], []
        for index, prompt in enumerate(prompts):
            text = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=False)
            prompt_ids.append(tokenizer.encode(text, add_special_tokens=False))
            answer = answers[index % len(answers)]
            ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
            completion_ids.append(ids)
        logprobs = [[0.0] * len(ids) for ids in completion_ids]
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids, "logprobs": logprobs}

    return rollout
