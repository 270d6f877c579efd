"""Tree attention: a segment's queries see its ancestors' keys in full and its own causally.

Tree packing runs each segment of a prefix tree as one forward. Its attention needs
the keys and values of every ancestor segment, kept differentiable so a branch's
backward reaches the shared prefix. transformers would take them as a KV cache and
an explicit (N, P + N) mask; the cache concatenates (a copy of the whole prefix per
segment, kept alive for the backward), and with a mask torch's CPU attention kernel
computes every (query, key) pair (we measured up to 1.8x slower than causal).

Here each ancestor block is one non-causal flash-attention call and the segment
itself one causal call, merged by their log-sum-exp; the backward runs the flash
backward of each block with the *merged* output and log-sum-exp (the ring-attention
identity), which gives each block its exact share of the gradient. The cost is
N * P + N * (N + 1) / 2 pairs — the tree's FLOP limit — with no mask and no copy
(the CPU kernel takes grouped-query K/V as they are). Off CPU it falls back to SDPA
over the concatenated K/V with a lower-right causal bias, which CUDA kernels take
natively.

Use: register() once, then run the model's forward under
`use_attention(model, ATTN_IMPLEMENTATION)` and `tree_context(past)`; the context
hands each layer its ancestors' blocks and collects the segment's own K/V.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

ATTN_IMPLEMENTATION = "swarmrl_tree"

KV = tuple[torch.Tensor, torch.Tensor]
"""Keys and values of one layer, `[B, K, T, E]` (K = key-value heads, after RoPE)."""

_flash_fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_flash_bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward


@dataclass
class TreeContext:
    """What one segment's forward reads and writes, per layer."""

    past: Sequence[Sequence[KV]]
    """Per layer: the ancestors' K/V blocks, root first."""
    own: dict[int, KV] = field(default_factory=dict)
    """Per layer index: the K/V this segment produced (its children's last block)."""


_CONTEXT: contextvars.ContextVar[TreeContext | None] = contextvars.ContextVar(
    "swarmrl_tree_context", default=None
)


@contextlib.contextmanager
def tree_context(past: Sequence[Sequence[KV]]) -> Iterator[TreeContext]:
    ctx = TreeContext(past)
    token = _CONTEXT.set(ctx)
    try:
        yield ctx
    finally:
        _CONTEXT.reset(token)


class _TreeAttention(torch.autograd.Function):
    """softmax(q [k_1 .. k_m, k_self]^T * scale + mask) [v_1 .. v_m, v_self], where the
    mask hides nothing of the blocks 1..m and is causal over `self`."""

    @staticmethod
    def forward(
        ctx: Any, scale: float, q_B_H_N_E: torch.Tensor, k_self: torch.Tensor,
        v_self: torch.Tensor, *past: torch.Tensor,
    ) -> torch.Tensor:
        out_B_H_N_E, lse_B_H_N = _flash_fwd(q_B_H_N_E, k_self, v_self, 0.0, True, scale=scale)
        if past:
            outs, lses = [out_B_H_N_E], [lse_B_H_N]
            for k, v in zip(past[0::2], past[1::2]):
                o, lse = _flash_fwd(q_B_H_N_E, k, v, 0.0, False, scale=scale)
                outs.append(o)
                lses.append(lse)
            lse_B_H_N = torch.logsumexp(torch.stack(lses), 0)
            weights = [torch.exp(lse - lse_B_H_N).unsqueeze(-1) for lse in lses]
            out_B_H_N_E = sum(o * w.to(o.dtype) for o, w in zip(outs, weights))
        ctx.save_for_backward(q_B_H_N_E, k_self, v_self, out_B_H_N_E, lse_B_H_N, *past)
        ctx.scale = scale
        result: torch.Tensor = out_B_H_N_E
        return result

    @staticmethod
    def backward(ctx: Any, grad_B_H_N_E: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k_self, v_self, out, lse, *past = ctx.saved_tensors
        grad = grad_B_H_N_E.contiguous()
        # With the merged output and lse, P_ij = exp(s_ij - lse_i) and D_i = rowsum(dO_i O_i)
        # are the full attention's: each block's backward is its exact share.
        dq, dk, dv = _flash_bwd(grad, q, k_self, v_self, out, lse, 0.0, True, scale=ctx.scale)
        grads: list[torch.Tensor | None] = [None, dq, dk, dv]
        for k, v in zip(past[0::2], past[1::2]):
            dq_b, dk_b, dv_b = _flash_bwd(grad, q, k, v, out, lse, 0.0, False, scale=ctx.scale)
            grads[1] = dq = dq + dq_b
            grads += [dk_b, dv_b]
        return tuple(grads)


def _repeat_kv(x_B_K_S_E: torch.Tensor, n_rep: int) -> torch.Tensor:
    if n_rep == 1:
        return x_B_K_S_E
    B, K, S, E = x_B_K_S_E.shape
    return x_B_K_S_E[:, :, None].expand(B, K, n_rep, S, E).reshape(B, K * n_rep, S, E)


def tree_attention(
    q_B_H_N_E: torch.Tensor, k_self: torch.Tensor, v_self: torch.Tensor,
    past: Sequence[KV], scale: float,
) -> torch.Tensor:
    """Attention of N queries over the `past` blocks (all visible) and their own K/V (causal)."""
    if q_B_H_N_E.device.type == "cpu" and q_B_H_N_E.dtype in (torch.float32, torch.bfloat16):
        flat = [t for kv in past for t in kv]
        apply: Any = _TreeAttention.apply
        out: torch.Tensor = apply(scale, q_B_H_N_E, k_self, v_self, *flat)
        return out
    from torch.nn.attention.bias import causal_lower_right

    k = torch.cat([kv[0] for kv in past] + [k_self], 2)
    v = torch.cat([kv[1] for kv in past] + [v_self], 2)
    n_rep = q_B_H_N_E.shape[1] // k.shape[1]
    N, S = q_B_H_N_E.shape[2], k.shape[2]
    return F.scaled_dot_product_attention(
        q_B_H_N_E, _repeat_kv(k, n_rep), _repeat_kv(v, n_rep),
        attn_mask=causal_lower_right(N, S), scale=scale,
    )


def tree_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers attention function (same contract as its `sdpa_attention_forward`)."""
    ctx = _CONTEXT.get()
    if attention_mask is not None or dropout > 0.0 or kwargs.get("sliding_window"):
        if ctx is not None:  # SDPA would silently drop the ancestors' blocks
            raise ValueError(
                "tree attention takes no mask, dropout or sliding window; plan with "
                "kinds=('rows',) for this model"
            )
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
        )
    N = query.shape[2]
    past: list[KV] = []
    if key.shape[2] > N:  # a KV cache already prepended its keys: one more visible block
        past.append((key[:, :, :-N], value[:, :, :-N]))
        key, value = key[:, :, -N:], value[:, :, -N:]
    if ctx is not None:
        layer = getattr(module, "layer_idx", None)
        if layer is None:
            raise ValueError(f"{type(module).__name__} has no layer_idx: can't run a tree")
        past = list(ctx.past[layer]) + past if ctx.past else past
        ctx.own[layer] = (key, value)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out_B_H_N_E = tree_attention(query, key, value, past, float(scale))
    return out_B_H_N_E.transpose(1, 2).contiguous(), None


def register() -> None:
    """Makes `ATTN_IMPLEMENTATION` a valid attention implementation name (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTN_IMPLEMENTATION, tree_attention_forward)


@contextlib.contextmanager
def use_attention(model: torch.nn.Module, name: str) -> Iterator[None]:
    """Runs the model's forwards inside the block with attention implementation `name`.

    Not thread-safe: the model's config is shared by its layers. The trainer owns its
    model, so nothing else runs a forward on it meanwhile.
    """
    config: Any = model.config
    previous = config._attn_implementation
    if name == previous:
        yield
        return
    config._attn_implementation = name
    try:
        yield
    finally:
        config._attn_implementation = previous
