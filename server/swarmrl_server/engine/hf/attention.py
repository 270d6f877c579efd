"""SDPA attention that reads grouped key/value heads in place, for `HFEngine`'s model.

transformers' `sdpa` attention expands the key/value heads of a GQA model (SmolLM2: 3
kv heads for 9 query heads) to one per query head (`repeat_kv`) whenever an attention
mask is given: its `use_gqa_in_sdpa` passes `enable_gqa` only without a mask, because
the CUDA flash kernel takes none. The engine always passes a mask (left padding), so
every decode step copied the whole KV cache, once per layer. A profile of the tiny model
decoding 32 rows over 1,024 positions spent 66 % of the step in that copy and 11 % in
attention. torch's CPU kernels (flash and math) take a mask together with `enable_gqa`,
so this variant passes both. The output is the same: the kernel reads query head h from
kv head h // groups, which is the layout `repeat_kv` builds. Measured by
`benchmarks/hf_decode.py`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "sdpa_gqa"


def sdpa_gqa_attention(
    module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
    attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
    is_causal: bool | None = None, **_: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature: query (B, H, Q, D), key and value
    (B, H_kv, K, D), a boolean mask (B, 1, Q, K) or None; returns (B, Q, H, D)."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", True)
    out = F.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling,
        is_causal=bool(causal and attention_mask is None and query.shape[2] > 1),
        enable_gqa=key.shape[1] != query.shape[1],
    )
    return out.transpose(1, 2).contiguous(), None


def use_gqa_sdpa(model: Any) -> bool:
    """Switches `model` from `sdpa` to this attention when it has grouped kv heads;
    returns whether it did. Other attention implementations are left alone."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    config = model.config
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if config._attn_implementation != "sdpa" or not heads or kv_heads == heads:
        return False
    AttentionInterface.register(NAME, sdpa_gqa_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)  # the masks `sdpa` gets
    model.set_attn_implementation(NAME)
    return True
