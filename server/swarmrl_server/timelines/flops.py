"""FLOP cost model of one actor update (forward + backward) for a decoder-only transformer.

The planner uses it to decide where sharing a prefix pays; the benchmark uses it to
state each method's compute limit. The formula, per token:

    linear    = 6 * (N_nonembedding + V * d)           # 2 (fwd) + 4 (bwd) per weight;
                                                        # the LM head runs even when tied
    attention = 12 * n_layers * d_attn * keys_attended  # QK^T and AV: 2 * 2 * d_attn per
                                                        # (query, key) pair fwd, x3 with bwd

where `keys_attended` is how many keys the token's query actually looks at: its
position + 1 in a causal row, ancestors + itself in a prefix tree. A row of L tokens
therefore costs `linear * L + 12 * n_layers * d_attn * L * (L + 1) / 2`. Embedding
lookups, norms, softmax and the loss are left out (they are O(tokens) and small).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class ModelShape:
    """What the FLOP model needs to know about a model."""

    n_layers: int
    hidden: int
    attn_dim: int
    """Query heads x head dim (the width of QK^T and AV)."""
    vocab: int
    non_embedding_params: int

    @property
    def linear_flops_per_token(self) -> float:
        return 6.0 * (self.non_embedding_params + self.vocab * self.hidden)

    @property
    def attention_flops_per_key(self) -> float:
        return 12.0 * self.n_layers * self.attn_dim

    def flops(self, tokens: float, keys: float) -> float:
        """Forward + backward FLOPs of `tokens` queries attending to `keys` keys in total."""
        return tokens * self.linear_flops_per_token + keys * self.attention_flops_per_key

    def row_flops(self, length: int) -> float:
        """One causal row (no sharing)."""
        return self.flops(length, causal_keys(0, length))

    def segment_flops(self, past: int, length: int) -> float:
        """`length` tokens that attend to `past` earlier tokens and causally to each other."""
        return self.flops(length, causal_keys(past, length))

    def dense_flops(self, length: int) -> float:
        """A packed row under an explicit (L, L) mask: the kernel computes every pair."""
        return self.flops(length, float(length) * length)

    @classmethod
    def from_config(cls, config: Any, non_embedding_params: int) -> ModelShape:
        hidden = int(config.hidden_size)
        heads = int(config.num_attention_heads)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        return cls(
            n_layers=int(config.num_hidden_layers),
            hidden=hidden,
            attn_dim=heads * head_dim,
            vocab=int(config.vocab_size),
            non_embedding_params=non_embedding_params,
        )

    @classmethod
    def from_model(cls, model: torch.nn.Module) -> ModelShape:
        """Reads the shape of a transformers causal LM (counting its parameters)."""
        embeddings: set[int] = set()
        for getter in ("get_input_embeddings", "get_output_embeddings"):
            module = getattr(model, getter, lambda: None)()
            if module is not None:
                embeddings.update(id(p) for p in module.parameters())
        non_embedding = sum(p.numel() for p in model.parameters() if id(p) not in embeddings)
        return cls.from_config(model.config, non_embedding)


def causal_keys(past: int, length: int) -> float:
    """(query, key) pairs when `length` queries see `past` keys plus themselves causally."""
    return float(length) * past + length * (length + 1) / 2.0
