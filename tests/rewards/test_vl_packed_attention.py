"""The VL reward model's vision attention, packed into few sdpa calls, equals transformers' one call per chunk.

Runs where transformers has Qwen2.5-VL (no processor, no torchvision needed).
"""

from __future__ import annotations

import pytest
import torch
from transformers.models.qwen2_5_vl.configuration_qwen2_5_vl import Qwen2_5_VLVisionConfig
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLVisionAttention

from skyrl_rewards.rewards.models.vl_reward_model import PackedVisionAttention, packing_groups


@pytest.mark.parametrize(
    "lengths",
    [
        [64, 64, 16, 64, 32, 8, 64, 24],  # windows of several images: packed with padding
        [64, 64, 64],  # one length: no mask
        [200, 16, 16, 48],  # images of different sizes: more than one group
    ],
)
def test_packed_attention_equals_one_call_per_chunk(lengths: list[int]) -> None:
    torch.manual_seed(0)
    config = Qwen2_5_VLVisionConfig(hidden_size=32, num_heads=2, intermediate_size=64)
    config._attn_implementation = "sdpa"
    reference = Qwen2_5_VLVisionAttention(config).eval()
    packed = PackedVisionAttention(config).eval()
    packed.load_state_dict(reference.state_dict())
    length = sum(lengths)
    hidden = torch.randn(length, 32)
    angles = torch.randn(length, 16)
    position = (angles.cos(), angles.sin())
    cu_seqlens = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    with torch.no_grad():
        want = reference(hidden, cu_seqlens, position_embeddings=position)
        got = packed(hidden, cu_seqlens, position_embeddings=position)
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    assert len(packing_groups(lengths)) < len(lengths)
