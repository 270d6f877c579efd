"""`Batch`: the tensors of the rows `HFEngine` decodes together, and how rows join it.

Invariants (every method keeps them):

- row i of every tensor (each cache layer, `mask_B_T`, `next_pos_B`, `logits_B_V`)
  belongs to `rows[i]`;
- the cache holds `mask_B_T.shape[1]` positions per row. A row's real tokens are its
  rightmost mask-1 columns and its padding is the columns to their left (left
  padding), so one decode step appends one column for every row;
- `next_pos_B[i]` is the number of real tokens of row i (the position id of its next
  token), so a row's positions never depend on the padding. Row i therefore sees exactly
  what a forward pass of its own context would compute: padded keys are masked out, and
  the mask gives them zero weight in the softmax.

Rows join a running batch with `join`: both sides are left-padded to the longer one's
width and concatenated. This is continuous batching (vLLM's scheduler admits requests
at every step; here at a decode step of the wave). When the longest rows finish,
columns that are padding in every remaining row are dropped (`select` trims them), so
each step attends over the longest *live* context only.

A wave's first rows are prefilled in length buckets (`buckets`). Rows that resume after
an interrupting weight sync bring contexts of very different lengths. Prefilled as one
left-padded batch, every row would pay for the longest, in the quadratic attention part
too.

The cache's layers append in place (`GrowingLayer`): transformers' `DynamicLayer`
appends a token with `torch.cat`, which copies the layer's whole cache at every step.
With the tiny model decoding 32 rows over 1,024 positions, that copy was 58 % of a step
(SmolLM2: 31 %).

Joining needs a plain cache (`plain_cache`): a sliding-window layer keeps only its last
window, which left padding would shift. For such models the engine prefills a wave as one
batch and admits nothing mid-wave.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.cache_utils import DynamicLayer

from swarmrl_server.engine.hf.rows import Row

PREFILL_WASTE = 0.25
"""A prefill bucket's padding stays within this share of its real tokens."""


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of buffers with room to their
    right, so an append writes in place. When `keys` is not such a view (the batch
    replaced it: rows selected, joined, trimmed or padded), the next append moves it to
    a new buffer: one copy, as `torch.cat` made at every step."""

    _room: tuple[torch.Tensor, torch.Tensor] | None = None
    """The key and value buffers that `keys` and `values` are views of."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.keys, self.values
        if not self.is_initialized or keys is None or values is None or keys.numel() == 0:
            return super().update(key_states, value_states, *args, **kwargs)
        used, add = keys.shape[-2], key_states.shape[-2]
        bufs = self._room
        if (bufs is None or keys.data_ptr() != bufs[0].data_ptr()
                or keys.shape[:2] != bufs[0].shape[:2] or used + add > bufs[0].shape[-2]):
            room = used + add + max(64, used // 4)
            bufs = (keys.new_empty((*keys.shape[:2], room, keys.shape[-1])),
                    values.new_empty((*values.shape[:2], room, values.shape[-1])))
            bufs[0][:, :, :used] = keys
            bufs[1][:, :, :used] = values
            self._room = bufs
        bufs[0][:, :, used:used + add] = key_states
        bufs[1][:, :, used:used + add] = value_states
        self.keys, self.values = bufs[0][:, :, :used + add], bufs[1][:, :, :used + add]
        return self.keys, self.values


def new_cache(model: Any) -> Any:
    """A transformers `DynamicCache` for `model` whose layers are `GrowingLayer`s."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    if all(type(layer) is DynamicLayer for layer in cache.layers):
        cache.layers = [GrowingLayer() for _ in cache.layers]
    return cache


def plain_cache(model: Any) -> bool:
    """Whether every layer of `model`'s cache is a plain `DynamicLayer`, i.e. `new_cache`
    makes them `GrowingLayer`s (see the module docstring)."""
    return all(isinstance(layer, GrowingLayer) for layer in new_cache(model).layers)


def buckets(lengths: Sequence[int], waste: float = PREFILL_WASTE) -> list[list[int]]:
    """Indices of `lengths` grouped for prefill, longest first. Each group is left-padded
    to its first (longest) member, and that padding is at most `waste` x the group's real
    tokens. Equal lengths always share a group."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    groups: list[list[int]] = []
    real = 0
    for i in order:
        if groups and lengths[groups[-1][0]] * (len(groups[-1]) + 1) <= (1 + waste) * (
            real + lengths[i]
        ):
            groups[-1].append(i)
            real += lengths[i]
        else:
            groups.append([i])
            real = lengths[i]
    return groups


@dataclass(eq=False)
class Batch:
    """Rows decoding together, with their KV cache (see the module docstring)."""

    rows: list[Row]
    cache: Any
    """A transformers `DynamicCache` (`new_cache`): per layer, keys and values
    (B, heads, T, head_dim)."""
    mask_B_T: torch.Tensor
    next_pos_B: torch.Tensor
    logits_B_V: torch.Tensor
    """Each row's logits for its next token (fp32)."""

    @classmethod
    def prefill(
        cls, model: Any, rows: list[Row], pad_id: int,
        forward_kwargs: Callable[[list[Row]], dict[str, Any]], *, bucketed: bool = True,
    ) -> Batch:
        """Prefills each row's context (its prompt, and for a resumed row the tokens so
        far): in length buckets joined together, or (`bucketed=False`) as one batch."""
        if not rows:
            raise ValueError("prefill of no rows")
        contexts = [r.context() for r in rows]
        groups = buckets([len(c) for c in contexts]) if bucketed else [list(range(len(rows)))]
        parts = [cls._prefill_one(model, [rows[i] for i in group], [contexts[i] for i in group],
                                  pad_id, forward_kwargs) for group in groups]
        for part in parts[1:]:
            parts[0].join(part)
        return parts[0]

    @classmethod
    def _prefill_one(
        cls, model: Any, rows: list[Row], contexts: list[list[int]], pad_id: int,
        forward_kwargs: Callable[[list[Row]], dict[str, Any]],
    ) -> Batch:
        B, T = len(rows), max(len(c) for c in contexts)
        ids_B_T = torch.full((B, T), pad_id, dtype=torch.long)
        mask_B_T = torch.zeros((B, T), dtype=torch.long)
        for i, c in enumerate(contexts):
            ids_B_T[i, T - len(c):] = torch.tensor(c)
            mask_B_T[i, T - len(c):] = 1
        # Left padding: real tokens are numbered from 0 in each row, pads are masked.
        pos_B_T = (mask_B_T.cumsum(-1) - 1).clamp(min=0)
        cache = new_cache(model)
        out = model(input_ids=ids_B_T, attention_mask=mask_B_T, position_ids=pos_B_T,
                    past_key_values=cache, use_cache=True, logits_to_keep=1,
                    **forward_kwargs(rows))
        return cls(rows, cache, mask_B_T, mask_B_T.sum(-1), out.logits[:, -1, :].float())

    @property
    def width(self) -> int:
        return int(self.mask_B_T.shape[1])

    def decode(self, model: Any, tokens_B: torch.Tensor, kwargs: dict[str, Any]) -> None:
        """One decode step: feeds each row its sampled token, keeps the next logits."""
        self.mask_B_T = torch.cat([self.mask_B_T, self.mask_B_T.new_ones((len(self.rows), 1))],
                                  dim=-1)
        out = model(input_ids=tokens_B[:, None], attention_mask=self.mask_B_T,
                    position_ids=self.next_pos_B[:, None], past_key_values=self.cache,
                    use_cache=True, **kwargs)
        self.logits_B_V = out.logits[:, -1, :].float()
        self.next_pos_B = self.next_pos_B + 1

    def select(self, keep: list[int]) -> None:
        """Keeps only the rows at `keep` (in that order), then drops the columns that are
        padding in every remaining row."""
        keep_K = torch.tensor(keep)
        self.cache.batch_select_indices(keep_K)
        self.mask_B_T, self.next_pos_B = self.mask_B_T[keep_K], self.next_pos_B[keep_K]
        self.logits_B_V = self.logits_B_V[keep_K]
        self.rows = [self.rows[i] for i in keep]
        live_T = self.mask_B_T.any(0)
        first = int(live_T.to(torch.int8).argmax())  # the first column some row uses
        if first > 0:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, first:]
                layer.values = layer.values[:, :, first:]
            self.mask_B_T = self.mask_B_T[:, first:]

    def join(self, other: Batch) -> None:
        """Appends `other`'s rows: both are left-padded to the wider one's width."""
        width = max(self.width, other.width)
        for part in (self, other):
            part._pad_to(width)
        for mine, theirs in zip(self.cache.layers, other.cache.layers, strict=True):
            mine.keys = torch.cat([mine.keys, theirs.keys])
            mine.values = torch.cat([mine.values, theirs.values])
        self.mask_B_T = torch.cat([self.mask_B_T, other.mask_B_T])
        self.next_pos_B = torch.cat([self.next_pos_B, other.next_pos_B])
        self.logits_B_V = torch.cat([self.logits_B_V, other.logits_B_V])
        self.rows = self.rows + other.rows

    def _pad_to(self, width: int) -> None:
        extra = width - self.width
        if extra <= 0:
            return
        for layer in self.cache.layers:  # (B, heads, T, head_dim): pad T on the left
            layer.keys = F.pad(layer.keys, (0, 0, extra, 0))
            layer.values = F.pad(layer.values, (0, 0, extra, 0))
        self.mask_B_T = F.pad(self.mask_B_T, (extra, 0))
