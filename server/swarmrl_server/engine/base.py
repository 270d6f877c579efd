"""The engine interface: token ids in, token ids + logprobs out, streamed.

An engine knows nothing about chat, episodes or training. It takes a prompt as
token ids and sampling parameters, and streams back what it generated: chunks of
token ids with their logprobs and the text they add, then one final
`GenerationOutput`. Concurrent `generate` calls are batched together by the
engine.

Weight updates (`update_weights`) come in two kinds, which the trainer's
`weight_sync` option picks:
  - wait: calls in flight finish on the weights they started with; the new weights
    serve calls that start after. Every token of a call has one policy version.
  - interrupt: each call in flight is stopped at a token boundary, the weights are
    updated, and the call continues from its prompt + the tokens generated so far
    under the new version. The caller sees one uninterrupted call (same stream, no
    token lost or repeated); its `GenerationOutput.version_spans` say which version
    made which tokens. A sync thus never waits for the longest call in flight.

Logprobs are those of the sampling distribution, i.e. log_softmax(logits / T)
at the sampled token for temperature T > 0 (raw logits for T == 0), which is
what the trainer recomputes as the "old" logprob for the importance ratio. A trainable
model is therefore never asked for a truncated distribution (top_p < 1): the one rule,
for every engine, is `episodes.resolve.check_trained_sampling`.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import torch

FinishReason = Literal["stop", "length", "abort"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion."""

    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus mass in (0, 1]."""
    max_tokens: int = 256
    """Most tokens to generate (also capped by the model's context length)."""
    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end generation, besides the tokenizer's end-of-turn token."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends once the text ends with one; the text returned omits it."""
    seed: int | None = None
    """Per-request seed: the same seed, prompt and weights give the same tokens."""
    top_logprobs: int = 0
    """How many alternatives to report per generated token."""
    structural_tag: str | None = None
    """A constraint the completion must match before its end of turn: an xgrammar
    structural tag as JSON (vLLM's `structured_outputs.structural_tag` takes the same).
    Tokens are then sampled from, and their logprobs taken under, the distribution
    renormalised over what the grammar allows (see `engine.grammar`)."""
    affinity_key: str = ""
    """Routing hint, not sampling: calls with the same key (the episode id) go to the same
    replica, which holds their shared prefix in its cache (`scale.router`). Engines ignore
    it."""
    adapter: str = ""
    """The LoRA adapter that serves the call ("": the base model). Set by the model's
    `engine.adapter.AdapterEngine`, never by callers: a model's adapter is its identity."""


@dataclass(frozen=True)
class GenerationChunk:
    """Tokens generated since the previous chunk."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    """Text these tokens complete (held back while a character or stop string is incomplete)."""
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


def join_chunks(a: GenerationChunk, b: GenerationChunk) -> GenerationChunk:
    """`a` then `b` as one chunk (a consumer that fell behind gets them together)."""
    return GenerationChunk(
        token_ids=a.token_ids + b.token_ids, logprobs=a.logprobs + b.logprobs,
        text=a.text + b.text, top_logprobs=a.top_logprobs + b.top_logprobs,
    )


@dataclass(frozen=True)
class GenerationOutput:
    """The whole result of one call; the last item `generate` yields."""

    prompt_ids: list[int]
    completion_ids: list[int]
    """Every generated token, including the stop token (and a stop string's tokens)."""
    logprobs: list[float]
    text: str
    """Completion text without the stop token or stop string."""
    finish_reason: FinishReason
    policy_version: int
    """The version of the weights that made the last token (of every token unless a sync
    interrupted the call: see `version_spans`). Kept for clients that read one version."""
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    version_spans: list[tuple[int, int, int]] = field(default_factory=list)
    """(policy version, start, end): completion tokens [start, end) came from that
    version's weights, in order, covering every token. Empty: one span, `policy_version`
    over every token (engines that never resume a call)."""
    grammar: str = ""
    """The grammar the completion was decoded under (`engine.grammar.GrammarSpec` as JSON,
    what the trainer replays the mask from); "" for an unconstrained call."""

    def spans(self) -> list[tuple[int, int, int]]:
        """`version_spans`, or the one span `policy_version` when there are none."""
        return self.version_spans or [(self.policy_version, 0, len(self.completion_ids))]


class Spans:
    """The versions a running call's tokens come from: `at` is told the version each time
    the call (re)starts, `spans` closes them over the tokens made. A restart on the same
    version continues its span; a span with no token is dropped."""

    def __init__(self) -> None:
        self._starts: list[tuple[int, int]] = []

    def at(self, version: int, n_tokens: int) -> None:
        """The tokens from index `n_tokens` on come from `version`."""
        if self._starts and self._starts[-1][0] == version:
            return
        if self._starts and self._starts[-1][1] == n_tokens:  # the last span made nothing
            self._starts.pop()
            if self._starts and self._starts[-1][0] == version:
                return
        self._starts.append((version, n_tokens))

    def spans(self, n_tokens: int) -> list[tuple[int, int, int]]:
        ends = [start for _, start in self._starts[1:]] + [n_tokens]
        return [(v, a, b) for (v, a), b in zip(self._starts, ends) if b > a]

    @property
    def version(self) -> int | None:
        """The version of the current span (None before the call started)."""
        return self._starts[-1][0] if self._starts else None


@dataclass
class SyncTimes:
    """Where one weight sync's time went (an engine's `last_sync`), in seconds."""

    write_s: float = 0.0
    """The new weights written where the engine reads them (vLLM: safetensors on disk)."""
    drain_s: float = 0.0
    """Calls in flight out of the way: finished (wait) or stopped at a token (interrupt)."""
    reload_s: float = 0.0
    """The weights loaded into the serving model."""
    resume_s: float = 0.0
    """From the new version serving to the last interrupted call's first new token (its
    prompt + tokens so far prefilled again under the new weights)."""
    interrupted: int = 0
    """Calls stopped and resumed by this sync."""


def check_resolved(engine: Engine, prompt_ids: Sequence[int], params: SamplingParams) -> list[int]:
    """The invariants an engine relies on, asserted (not a validation: `episodes.resolve`
    refused bad input before the call got here); returns the prompt as a list."""
    prompt = list(prompt_ids)
    assert 0 < len(prompt) < engine.max_model_len, "unresolved request: the prompt leaves no room"
    assert params.max_tokens >= 1, "unresolved request: max_tokens < 1"
    return prompt


class Engine(abc.ABC):
    """A model that serves tokens. Implementations: `HFEngine` (transformers, in process),
    `VLLMEngine` (vLLM servers over HTTP), `EchoEngine` (no model: front-door load tests)."""

    name: str
    """The model's name, as clients address it."""
    max_model_len: int
    """Context length: prompt + completion tokens."""
    vocab_size: int
    """Token ids must be in [0, vocab_size)."""
    eos_token_ids: tuple[int, ...]
    """Tokens that end a turn (the chat template's end-of-turn token)."""
    weight_sync_default: str = "interrupt"
    """The `weight_sync` a trainer of this engine's model uses when its train options name
    none (`TrainerConfig.weight_sync`): the one measured to learn faster on this engine.
    Not measured for learning on the hf engine; interrupt keeps its faster syncs
    (benchmarks/weight_sync.py). `VLLMEngine` sets its own."""
    _last_sync: SyncTimes | None = None

    def _serve_like(self, inner: Engine) -> None:
        """Takes `inner`'s model facts (context, vocabulary, end tokens, weight-sync
        default): for an engine that wraps another's model (an adapter view,
        a router over replicas) and serves it unchanged."""
        self.max_model_len = inner.max_model_len
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids
        self.weight_sync_default = inner.weight_sync_default

    @property
    def last_sync(self) -> SyncTimes | None:
        """Where the latest weight sync's time went; None before one (or for an engine that
        does not measure it)."""
        return self._last_sync

    @property
    @abc.abstractmethod
    def policy_version(self) -> int:
        """Version of the weights serving new calls."""

    @abc.abstractmethod
    async def start(self) -> None:
        """Starts background work (batching loop). Idempotent."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stops background work; calls in flight finish with finish_reason "abort"."""

    @abc.abstractmethod
    def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        """Streams chunks, then exactly one GenerationOutput. Closing the iterator early
        cancels the request.

        The request is a resolved one (`episodes.resolve`: every user-input rule applied
        there, once); an engine trusts it and only asserts its own invariants
        (`check_resolved`)."""

    @abc.abstractmethod
    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        """Loads new weights; calls started after this returns use them. `interrupt`: calls
        in flight continue on them too, from their next token (module docstring); else they
        finish on the weights they started with."""
