"""The grammar mask of constrained calls, replayed in the trainer.

An engine decodes a forced tool call or a JSON response format under an xgrammar
grammar: at each step the logits of forbidden tokens are -inf before the log-softmax,
so each token is drawn from, and its logprob recorded under, the masked distribution
(`engine.grammar`). The call records the grammar (`CallRecord.grammar`, a
`GrammarSpec`), never a mask: a matcher is deterministic, so replaying it along the
recorded completion ids gives the allowed set before every token again, bit for bit
(`GrammarReplay.replay`). The trainer then masks its own logits at those positions
before its log-softmax (`timelines.logprobs`), and recomputes the distribution the
token was drawn from; the tests hold it to the recorded logprobs.

Invariants:
- Only a *choice* is trained: a token the grammar allowed alone had probability 1
  whatever the weights (logprob 0, no gradient), so it gets loss mask 0 (`choices`).
  So does every token from the first one the replayed grammar rejects on (a record the
  grammar does not reproduce cannot be recomputed; never seen from our engines).
- A timeline carries its constrained spans as (start, end, grammar JSON), never masks
  (`Timeline.grammars`): rows travel to FSDP and Ray workers as they are, and every
  worker replays what it trains (`row_masks`). Replays are cached per (grammar,
  completion), so the controller's replay (for the loss mask) serves the in-process
  forward.
- Masked logits are set to the float32 minimum, not -inf: the same softmax (exp gives
  0 exactly either way) without 0 x inf in the entropy or in its gradient.
"""

from __future__ import annotations

import collections
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from swarmrl_server.engine.grammar import GrammarCompiler, GrammarSpec

REPLAY_CACHE = 4096
"""Replayed completions kept (LRU), each an int32 bitmask of tokens x vocab / 32."""


@dataclass(frozen=True)
class Replayed:
    """A grammar replayed along one completion."""

    bitmask_N_W: torch.Tensor
    """xgrammar's packed bitmask (int32, bit j of word w = token 32 w + j): row i holds the
    tokens allowed before completion token i (all tokens from `accepted` on)."""
    choices_N: list[bool]
    """Whether completion token i was a choice: accepted by the grammar, which allowed more
    than one token there."""
    accepted: int
    """Completion tokens the grammar accepted, from the first (all of them, normally)."""


@dataclass
class RowMask:
    """The grammar masks of one timeline, at its outputs (aligned with token_ids[1:]:
    output p predicts token p + 1)."""

    rows: dict[int, int]
    """Output position -> row of `bitmask_M_W` (positions without a grammar are absent)."""
    bitmask_M_W: torch.Tensor

    def at(self, positions: Sequence[int]) -> tuple[list[int], list[int]]:
        """For outputs `positions`: (indices into `positions` that are masked, their rows)."""
        hits = [(k, self.rows[p]) for k, p in enumerate(positions) if p in self.rows]
        return [k for k, _ in hits], [r for _, r in hits]


def allowed_M_V(bitmask_M_W: torch.Tensor, V: int) -> torch.Tensor:
    """The packed bitmask as booleans over `V` logits (ids past the mask: forbidden)."""
    bits_M_W_32 = (bitmask_M_W.unsqueeze(-1) >> torch.arange(32, dtype=torch.int32)) & 1
    bits_M_X = bits_M_W_32.flatten(1).bool()
    if bits_M_X.shape[1] >= V:
        return bits_M_X[:, :V]
    return torch.nn.functional.pad(bits_M_X, (0, V - bits_M_X.shape[1]))


def forced_N(bitmask_N_W: torch.Tensor, V: int) -> torch.Tensor:
    """Whether each row allows exactly one of the first `V` tokens: one nonzero word, and
    that a power of two (word tests: unpacking N x V booleans to count them would cost
    the replay more than the matcher itself)."""
    full, rest = divmod(V, 32)
    nonzero_N_W = bitmask_N_W[:, :full] != 0
    count_N = nonzero_N_W.sum(1)
    first_N = nonzero_N_W.to(torch.uint8).argmax(1, keepdim=True)
    word_N = bitmask_N_W[:, :full].gather(1, first_N)[:, 0]
    if rest:  # the last word's bits past V are not tokens
        last_N = bitmask_N_W[:, full] & ((1 << rest) - 1)
        count_N = count_N + (last_N != 0)
        word_N = torch.where(last_N != 0, last_N, word_N)
    # int32 wraps: the sign bit alone (-2**31) passes as the power of two it is.
    return (count_N == 1) & ((word_N & (word_N - 1)) == 0)


def mask_rows(scaled_N_V: torch.Tensor, index_M: torch.Tensor, bitmask_M_W: torch.Tensor
              ) -> torch.Tensor:
    """`scaled_N_V` with the tokens each grammar row forbids set to the float minimum, at
    rows `index_M` (out of place: differentiable; masked entries get no gradient)."""
    if index_M.numel() == 0:
        return scaled_N_V
    allowed = allowed_M_V(bitmask_M_W, scaled_N_V.shape[-1]).to(scaled_N_V.device)
    masked_M_V = scaled_N_V[index_M].masked_fill(~allowed, torch.finfo(scaled_N_V.dtype).min)
    return scaled_N_V.index_put((index_M.to(scaled_N_V.device),), masked_M_V)


class GrammarReplay:
    """Replays recorded grammars for one model's tokenizer (compilers per stop-token set,
    like the engine that decoded them; compiled grammars and replays cached)."""

    def __init__(self, tokenizer: Any = None, cache_size: int = REPLAY_CACHE, *,
                 path: Path | None = None) -> None:
        self._tokenizer = tokenizer
        self._path = path
        self._compilers: dict[tuple[tuple[int, ...], int], GrammarCompiler] = {}
        self._cache: collections.OrderedDict[tuple[str, tuple[int, ...]], Replayed] = (
            collections.OrderedDict())
        self._cache_size = cache_size

    @classmethod
    def for_model(cls, path: Path) -> GrammarReplay:
        """The replay of the model at `path` (its tokenizer is loaded at the first replay:
        a model whose calls are never constrained never loads it)."""
        return cls(path=path)

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self._path, local_files_only=True)
        return self._tokenizer

    def replay(self, grammar: str, completion_ids: Sequence[int]) -> Replayed:
        """The allowed set before each token of `completion_ids` under `grammar` (a
        `GrammarSpec` as JSON)."""
        key = (grammar, tuple(completion_ids))
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return hit
        import xgrammar as xgr

        spec = GrammarSpec.from_json(grammar)
        ckey = (spec.stop_token_ids, spec.vocab_size)
        if ckey not in self._compilers:
            self._compilers[ckey] = GrammarCompiler(
                self.tokenizer, spec.vocab_size, spec.stop_token_ids)
        matcher = self._compilers[ckey].matcher(spec.structural_tag, field="grammar")
        N = len(completion_ids)
        bitmask_N_W = xgr.allocate_token_bitmask(max(N, 1), spec.vocab_size)[:N]
        accepted = 0
        for i, token in enumerate(completion_ids):
            if matcher.is_terminated():
                break
            matcher.fill_next_token_bitmask(bitmask_N_W, i)
            if not matcher.accept_token(int(token)):
                break
            accepted += 1
        forced = forced_N(bitmask_N_W, spec.vocab_size).tolist()
        choices = [i < accepted and not forced[i] for i in range(N)]
        out = Replayed(bitmask_N_W, choices, accepted)
        self._cache[key] = out
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return out

    def clear(self) -> None:
        """Forgets every replay (the compiled grammars stay)."""
        self._cache.clear()

    def choices(self, grammar: str, completion_ids: Sequence[int]) -> list[bool]:
        """Which completion tokens were a choice (what `merge_calls` trains)."""
        return self.replay(grammar, completion_ids).choices_N

    def row_masks(self, timelines: Sequence[Any]) -> list[RowMask | None]:
        """Each timeline's `RowMask` (None for a timeline without constrained spans)."""
        out: list[RowMask | None] = []
        for t in timelines:
            if not t.grammars:
                out.append(None)
                continue
            rows: dict[int, int] = {}
            blocks: list[torch.Tensor] = []
            m = 0
            for start, end, grammar in t.grammars:
                replayed = self.replay(grammar, t.token_ids[start:end])
                for i in range(replayed.accepted):
                    if start + i >= 1:  # output p predicts token p + 1
                        rows[start + i - 1] = m + i
                blocks.append(replayed.bitmask_N_W)
                m += end - start
            out.append(RowMask(rows, torch.cat(blocks)))
        return out


__all__ = ["GrammarReplay", "Replayed", "RowMask", "allowed_M_V", "forced_N", "mask_rows"]
