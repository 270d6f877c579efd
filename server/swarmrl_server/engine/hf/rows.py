"""`HFEngine`'s rows and what one decode step does to them: sample, emit, finish.

Pure functions over one wave's logits, run on the engine's scheduler thread; each row
hands its chunks to its caller's event loop (`Row.send`). Kept apart from the
scheduler (`engine.hf.engine`) so the sampling rule reads on its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from swarmrl_server.engine.base import (
    FinishReason,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    Spans,
)
from swarmrl_server.engine.text import TextStream

if TYPE_CHECKING:
    from swarmrl_server.engine.grammar import GrammarCompiler


@dataclass(eq=False)
class Row:
    """One call in `HFEngine`, from submission until its GenerationOutput is sent."""

    prompt_ids: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue[GenerationChunk | GenerationOutput | BaseException]
    stream: TextStream
    generator: torch.Generator | None
    version: int = 0
    """The policy version of the weights serving the call (set when its wave starts)."""
    spans: Spans = field(default_factory=Spans)
    """Which version made which tokens (a new span when a sync interrupted the call and
    it resumed on new weights)."""
    resumed: bool = False
    """Interrupted by a sync and queued again: its next wave prefills prompt + tokens."""
    matcher: Any = None
    """xgrammar matcher when the call is constrained (see engine.grammar)."""
    grammar: str = ""
    """The matcher's `GrammarSpec` as JSON, recorded with the output ("" unconstrained)."""
    cancelled: bool = False
    """Set on the event loop when the caller closes the iterator; the scheduler drops the row."""
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)

    def send(self, item: GenerationChunk | GenerationOutput | BaseException) -> None:
        """Hands an item to the caller's event loop (called from the scheduler thread)."""
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, item)
        except RuntimeError:  # the caller's loop is closed: nobody is listening
            self.cancelled = True

    def context(self) -> list[int]:
        """What the next wave prefills: the prompt and the tokens generated so far."""
        return self.prompt_ids + self.completion_ids if self.completion_ids else self.prompt_ids

    def finish(self, reason: FinishReason, policy_version: int) -> None:
        """Sends the output; `policy_version` stamps a call that never ran."""
        spans = self.spans.spans(len(self.completion_ids))
        self.send(
            GenerationOutput(
                prompt_ids=self.prompt_ids,
                completion_ids=self.completion_ids,
                logprobs=self.logprobs,
                text=self.stream.text,
                finish_reason=reason,
                policy_version=spans[-1][0] if spans else policy_version,
                top_logprobs=self.top_logprobs,
                version_spans=spans,
                grammar=self.grammar,
            )
        )


@dataclass(frozen=True)
class SampledStep:
    """One decode step's draws, one entry per row."""

    tokens: list[int]
    tokens_B: torch.Tensor
    """The same ids as a tensor (B,), for the next forward pass."""
    logprobs: list[float]
    tops: list[list[tuple[int, float]]]
    """Each row's `top_logprobs` alternatives ([] when it asked for none)."""


def sample_step(
    rows: Sequence[Row], logits_B_V: torch.Tensor, grammar: GrammarCompiler | None
) -> SampledStep:
    """Samples one token per row from `logits_B_V` (greedy rows take the argmax), with
    logprobs and alternatives under the tempered distribution (see `engine.hf.engine`)."""
    matchers = [r.matcher for r in rows]
    if grammar is not None and any(m is not None for m in matchers):
        # Masked before the softmax: sampled from, and logprobs of, the renormalised
        # distribution over what the grammar allows (engine.grammar).
        grammar.mask_(matchers, logits_B_V)
    temps_B = torch.tensor([r.params.temperature or 1.0 for r in rows])
    logprobs_B_V = torch.log_softmax(logits_B_V / temps_B[:, None], dim=-1)
    tokens: list[int] = []
    for i, r in enumerate(rows):
        if r.generator is None:  # greedy
            tokens.append(int(logprobs_B_V[i].argmax()))
            continue
        probs_V = logprobs_B_V[i].exp()
        if r.params.top_p < 1.0:
            probs_V = top_p_filter(probs_V, r.params.top_p)
        tokens.append(int(torch.multinomial(probs_V, 1, generator=r.generator)))
    tokens_B = torch.tensor(tokens)
    for m, token in zip(matchers, tokens):
        if m is not None and not m.is_terminated():
            m.accept_token(token)
    token_lps = logprobs_B_V.gather(1, tokens_B[:, None])[:, 0].tolist()
    k_max = max(r.params.top_logprobs for r in rows)
    top_ids: list[list[int]] = []
    top_lps: list[list[float]] = []
    if k_max:
        top_B_K = logprobs_B_V.topk(k_max, dim=-1)
        top_ids, top_lps = top_B_K.indices.tolist(), top_B_K.values.tolist()
    tops = [
        list(zip(top_ids[i][: r.params.top_logprobs], top_lps[i][: r.params.top_logprobs]))
        if r.params.top_logprobs
        else []
        for i, r in enumerate(rows)
    ]
    return SampledStep(tokens, tokens_B, token_lps, tops)


def emit(
    r: Row, token: int, logprob: float, tops: list[tuple[int, float]], version: int,
    max_model_len: int,
) -> None:
    """Records a token for `r`, streams its chunk, and finishes the call if it ended."""
    r.completion_ids.append(token)
    r.logprobs.append(logprob)
    if r.params.top_logprobs:
        r.top_logprobs.append(tops)
    n = len(r.completion_ids)
    at_limit = n >= r.params.max_tokens or len(r.prompt_ids) + n >= max_model_len
    reason: FinishReason | None = None
    if token in r.stop_ids:
        text = r.stream.push(None, final=True)  # the stop token adds no text
        reason = "stop"
    else:
        text = r.stream.push(token, final=at_limit)
        if r.stream.stopped:
            reason = "stop"
        elif at_limit:
            reason = "length"
    r.send(GenerationChunk([token], [logprob], text, [tops] if r.params.top_logprobs else []))
    if reason is not None:
        r.finish(reason, version)
        r.cancelled = True  # done: the row leaves the batch


def top_p_filter(probs_V: torch.Tensor, top_p: float) -> torch.Tensor:
    """Zeroes the tail outside the smallest set of tokens with mass >= top_p."""
    sorted_V, order_V = probs_V.sort(descending=True)
    outside_V = (sorted_V.cumsum(0) - sorted_V) >= top_p  # the top token always stays
    sorted_V = sorted_V.masked_fill(outside_V, 0.0)
    return torch.zeros_like(probs_V).scatter_(0, order_V, sorted_V)


