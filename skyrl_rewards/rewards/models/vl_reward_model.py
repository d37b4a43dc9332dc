"""A vision-language sequence classifier (Qwen2.5-VL) as vLLM serves it: the model the local runner loads.

transformers has no ``Qwen2_5_VLForSequenceClassification``; vLLM serves one
(``vllm serve <folder> --runner pooling --convert classify``: its
``as_seq_cls_model`` adapter puts a linear ``score`` head on the language
model's last-token hidden state). :class:`Qwen2_5_VLForSequenceClassification`
is that model in transformers, so the local and the served values agree:

- the checkpoint: a folder written by ``save_pretrained`` whose ``config.json``
  has ``"architectures": ["Qwen2_5_VLForSequenceClassification"]`` (what
  makes :func:`~skyrl_rewards.rewards.models.reward_model.build_runner` pick
  the vision-language runner), a ``Qwen2_5_VLConfig`` with ``num_labels: 1``,
  the base model's weights under ``model.`` (``model.visual.*``,
  ``model.language_model.*``, as ``Qwen2_5_VLForConditionalGeneration`` saves
  them; vLLM maps these names) and ``score.weight`` of shape
  ``(1, hidden_size)``, no bias; its processor beside it (``AutoProcessor``,
  read with ``local_files_only``; the Qwen2.5-VL processor needs torchvision);
- the value: ``score(h)``, ``h`` the language model's last hidden state at
  the input's last real token, the raw logit in float32 (vLLM's
  ``use_activation: false``).

How rows become processor inputs, batches and failures is the runner's:
:class:`~skyrl_rewards.rewards.models.reward_model.VisionRewardModelRunner`.
Needs transformers >= 4.52 (``Qwen2_5_VLModel`` with its vision tower);
importing this module imports torch and transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel, Qwen2_5_VLPreTrainedModel

PER_IMAGE = ("pixel_values", "image_grid_thw")
"""Processor outputs concatenated across a batch's rows (one entry per image patch / image)."""


class Qwen2_5_VLForSequenceClassification(Qwen2_5_VLPreTrainedModel):
    """Qwen2.5-VL with a linear ``score`` head on the last token: vLLM's ``--convert classify`` model."""

    config_class = Qwen2_5_VLConfig

    def __init__(self, config: Qwen2_5_VLConfig) -> None:
        super().__init__(config)
        self.model = Qwen2_5_VLModel(config)
        self.score = nn.Linear(config.text_config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def forward(self, **inputs: Any) -> torch.Tensor:
        """``(rows, num_labels)`` logits at each row's last unpadded token (right padding)."""
        hidden = self.model(**inputs).last_hidden_state
        last = inputs["attention_mask"].sum(dim=-1) - 1
        return self.score(hidden[torch.arange(hidden.shape[0], device=hidden.device), last])


def last_token_values(
    model: Qwen2_5_VLForSequenceClassification, inputs: Mapping[str, Any]
) -> list[float]:
    """The first label's logit per row, in float32, for processor outputs ``inputs``."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        logits = model(**{key: value.to(device) for key, value in inputs.items()})
    return [float(v) for v in logits[:, 0].float().cpu().tolist()]


def collate(rows: list[Mapping[str, Any]], pad_id: int) -> dict[str, Any]:
    """One batch from per-input processor outputs: padded on the right, image entries concatenated.

    Each row is a batch of one (``input_ids`` of shape ``(1, length)``...);
    ``input_ids`` are padded with ``pad_id``, the other per-token entries
    (attention mask, token types) with 0, :data:`PER_IMAGE` entries concatenated
    in row order.
    """
    width = max(row["input_ids"].shape[1] for row in rows)
    inputs: dict[str, Any] = {}
    for key in dict.fromkeys(key for row in rows for key in row):
        if key in PER_IMAGE:
            inputs[key] = torch.cat([row[key] for row in rows if key in row])
            continue
        fill = pad_id if key == "input_ids" else 0
        padded = torch.full((len(rows), width), fill, dtype=rows[0][key].dtype)
        for position, row in enumerate(rows):
            padded[position, : row[key].shape[1]] = row[key][0]
        inputs[key] = padded
    return inputs
