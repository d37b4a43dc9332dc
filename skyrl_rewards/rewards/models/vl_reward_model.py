"""A vision-language sequence classifier (Qwen2.5-VL) as vLLM serves it: the model the local runner loads.

transformers has no ``Qwen2_5_VLForSequenceClassification``; vLLM serves one
(``vllm serve <folder> --runner pooling --convert classify``: its
``as_seq_cls_model`` adapter puts a linear ``score`` head on the language
model's last-token hidden state). :class:`Qwen2_5_VLForSequenceClassification`
is that model in transformers, so the local and the served values agree:

- the checkpoint: a folder written by ``save_pretrained`` whose ``config.json``
  has ``"architectures": ["Qwen2_5_VLForSequenceClassification"]`` (what
  makes :func:`~skyrl_rewards.rewards.models.reward_model_runners.build_runner` pick
  the vision-language runner), a ``Qwen2_5_VLConfig`` with ``num_labels: 1``,
  the base model's weights under ``model.`` (``model.visual.*``,
  ``model.language_model.*``, as ``Qwen2_5_VLForConditionalGeneration`` saves
  them; vLLM maps these names) and ``score.weight`` of shape
  ``(1, hidden_size)``, no bias; its processor beside it (``AutoProcessor``,
  read with ``local_files_only``; the Qwen2.5-VL processor needs torchvision);
- the value: ``score(h)``, ``h`` the language model's last hidden state at
  the input's last real token, the raw logit in float32 (vLLM's
  ``use_activation: false``).

The vision tower's attention runs every window (and, in its full-attention
layers, every image) of a pass in one ``scaled_dot_product_attention`` call
(:class:`PackedVisionAttention`), where transformers' sdpa path makes one
call per window: tens of small calls per image and layer.

How rows become model inputs, batches and failures is the runner's:
:class:`~skyrl_rewards.rewards.models.vl_runner.VisionRewardModelRunner`.
Needs transformers >= 4.52 (``Qwen2_5_VLModel`` with its vision tower);
importing this module imports torch and transformers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn import functional
from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel, Qwen2_5_VLPreTrainedModel
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
    Qwen2_5_VLVisionAttention,
    apply_rotary_pos_emb_vision,
)

MAX_PACKING_WASTE = 2
"""Most padded / real positions in one group of chunks packed into one attention call."""


class PackedVisionAttention(Qwen2_5_VLVisionAttention):
    """The vision tower's attention with the chunks (windows, or images) of a pass packed into few sdpa calls.

    The chunks of ``cu_seqlens`` are grouped, longest first, so that a group
    padded to its longest chunk stays within :data:`MAX_PACKING_WASTE` times
    its real positions (:func:`packing_groups`); each group is gathered into a
    ``(chunks, heads, longest, head_dim)`` batch, its padding masked out of the
    keys (no mask when its chunks are of one length), and scattered back: the
    attention of one call per chunk, up to float rounding, in a few calls per
    layer. Projections run on the real positions only. An attention
    implementation other than sdpa runs as in transformers.
    """

    def forward(  # type: ignore[override]
        self,
        hidden_states: torch.Tensor,
        cu_seqlens: torch.Tensor,
        position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
        **kwargs: Any,
    ) -> torch.Tensor:
        if self.config._attn_implementation != "sdpa" or position_embeddings is None:
            return super().forward(
                hidden_states, cu_seqlens, position_embeddings=position_embeddings, **kwargs
            )
        length, device = hidden_states.shape[0], hidden_states.device
        query, key, value = (
            self.qkv(hidden_states).reshape(length, 3, self.num_heads, -1).permute(1, 0, 2, 3)
        ).unbind(0)
        query, key = apply_rotary_pos_emb_vision(query, key, *position_embeddings)
        output = torch.empty_like(query)
        bounds = cu_seqlens.tolist()
        lengths = [end - start for start, end in zip(bounds, bounds[1:], strict=False)]
        for group in packing_groups(lengths):
            sizes = torch.tensor([lengths[chunk] for chunk in group], device=device)
            offsets = torch.arange(lengths[group[0]], device=device)
            starts = torch.tensor([bounds[chunk] for chunk in group], device=device)
            real = offsets[None, :] < sizes[:, None]  # (chunks, longest)
            index = (starts[:, None] + offsets[None, :]).clamp(max=length - 1)
            mask = None if bool(real.all()) else real[:, None, None, :]
            packed = [tensor[index].transpose(1, 2) for tensor in (query, key, value)]
            attended = functional.scaled_dot_product_attention(
                *packed, attn_mask=mask, scale=self.scaling
            )
            output[index[real]] = attended.transpose(1, 2)[real]
        return self.proj(output.reshape(length, -1))


def packing_groups(lengths: list[int]) -> list[list[int]]:
    """Chunk indices, longest first, grouped so that chunks x longest <= MAX_PACKING_WASTE x their sum.

    Empty chunks are left out.

    >>> packing_groups([64, 4, 64, 4, 4, 0])
    [[0, 2, 1, 3], [4]]
    """
    groups: list[list[int]] = []
    size = 0
    for chunk in sorted(range(len(lengths)), key=lengths.__getitem__, reverse=True):
        if lengths[chunk] == 0:
            continue
        if groups and (len(groups[-1]) + 1) * lengths[groups[-1][0]] <= MAX_PACKING_WASTE * (
            size + lengths[chunk]
        ):
            groups[-1].append(chunk)
            size += lengths[chunk]
        else:
            groups.append([chunk])
            size = lengths[chunk]
    return groups


class Qwen2_5_VLForSequenceClassification(Qwen2_5_VLPreTrainedModel):
    """Qwen2.5-VL with a linear ``score`` head on the last token: vLLM's ``--convert classify`` model."""

    config_class = Qwen2_5_VLConfig

    def __init__(self, config: Qwen2_5_VLConfig) -> None:
        super().__init__(config)
        self.model = Qwen2_5_VLModel(config)
        for block in self.model.visual.blocks:
            block.attn = PackedVisionAttention(block.attn.config)
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
    """The first label's logit per row, in float32, for model inputs ``inputs`` (on its device)."""
    with torch.inference_mode():
        logits = model(**inputs)
    return [float(v) for v in logits[:, 0].float().cpu().tolist()]


def fast_processor(path: str) -> Any:
    """The checkpoint's processor with its torchvision-backed ("fast") image processor.

    That image processor takes a batch's images in one call and runs on the
    device it is given (``device="cuda"``): resizing and normalising on the GPU.
    """
    import transformers
    from packaging.version import Version
    from transformers import AutoImageProcessor, AutoProcessor

    if Version(transformers.__version__) < Version("5"):
        return AutoProcessor.from_pretrained(path, local_files_only=True, use_fast=True)
    images = AutoImageProcessor.from_pretrained(path, local_files_only=True, backend="torchvision")
    return AutoProcessor.from_pretrained(path, local_files_only=True, image_processor=images)
