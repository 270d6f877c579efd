"""`EchoEngine`: answers at once with deterministic tokens, no model forward.

It exists for load tests of the front doors (gRPC, HTTP): everything around the
engine (tokenizer, chat rendering, recording, streaming) runs for real, while the
engine costs next to nothing.

It is a model all the same, with a distribution that the logprobs it reports are
exact for: at step i < `reply_tokens` the next token is uniform over K candidates
(ordinary tokens of the prompt, rotated by a hash of the prompt and i), and at
step `reply_tokens` it is the end-of-turn token with probability 1. So:
  - temperature 0 picks the first candidate: the reply depends on the prompt only;
  - temperature > 0 draws from the candidates with a per-call `random.Random`
    (seeded by `seed`, else random): the same seed gives the same reply;
  - a token's logprob is -log K (0 for the forced end of turn), whatever the
    temperature, since tempering a uniform distribution leaves it uniform; top_p
    keeps the first ceil(top_p * K) candidates and, as in `HFEngine`, the logprob
    is that of the distribution before truncation.

Under a grammar (`params.structural_tag`, see `engine.grammar`) the distribution is
the same one masked and renormalised: the end of turn as soon as the grammar allows
it, else uniform over the candidates the grammar allows or, when it allows none of
them, over the first K tokens it allows (from the same rotated start). Enumerations
and fixed scaffolding thus end quickly; free-form strings may run to max_tokens.

It honours the rest of the `Engine` contract like the others: prompt and sampling
checks, stop tokens and strings, max_tokens and the context limit, abort on close
or stop, and a policy version per call (weights are ignored: there are none). A sync
with `interrupt=True` moves the calls in flight to the new version at their next token
(a new span in `version_spans`); a plain one leaves them on the version they started
with. Either way the tokens are the same: the echo model has no weights to change.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import secrets
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swarmrl_server.engine.base import (
    Engine,
    FinishReason,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    Spans,
    check_resolved,
)
from swarmrl_server.engine.grammar import GrammarCompiler, grammar_json
from swarmrl_server.engine.text import TextStream, end_of_turn_ids
from swarmrl_server.errors import Reason, unavailable

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

CANDIDATES = 8
"""K: tokens the echo model spreads its probability over at each step."""
STREAM_INTERVAL = 4
"""Tokens made between two yields to the event loop when there is no token delay (a
real engine's output also arrives in bursts: vLLM's stream interval, a batch step)."""


class EchoEngine(Engine):
    """A deterministic stand-in model with a real tokenizer (see the module docstring)."""

    def __init__(
        self,
        name: str,
        tokenizer: PreTrainedTokenizerBase,
        *,
        vocab_size: int | None = None,
        max_model_len: int = 2048,
        reply_tokens: int = 16,
        token_delay_s: float = 0.0,
    ) -> None:
        """`reply_tokens`: tokens before the end of turn; `token_delay_s`: sleep per token
        (0: just yield to the event loop every `STREAM_INTERVAL` tokens)."""
        self.name = name
        self.tokenizer = tokenizer
        self.vocab_size = int(vocab_size or len(tokenizer))
        self.max_model_len = max_model_len
        self.reply_tokens = reply_tokens
        self.token_delay_s = token_delay_s
        self.eos_token_ids = end_of_turn_ids(tokenizer)
        # Control tokens (chat markers, eos) never enter the pool: replies are plain text.
        special = set(getattr(tokenizer, "all_special_ids", [])) | set(self.eos_token_ids)
        special |= set(getattr(tokenizer, "added_tokens_decoder", {}))
        self._special = frozenset(special)
        # Fallback candidates for prompts made only of special tokens.
        self._fallback = [t for t in range(min(self.vocab_size, 512)) if t not in special]
        self._policy_version = 0
        self._in_flight_version = 0
        """The version calls in flight move to at their next token (the last interrupting
        sync's)."""
        self._running = False
        self._tokens = 0
        self._grammar: GrammarCompiler | None = None

    @classmethod
    def from_pretrained(cls, name: str, path: Path | str, **kwargs: Any) -> EchoEngine:
        """Loads only the tokenizer and config of a model directory (no weights)."""
        from transformers import AutoConfig, AutoTokenizer

        config = AutoConfig.from_pretrained(path, local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        kwargs.setdefault("max_model_len", getattr(config, "max_position_embeddings", 2048))
        return cls(name, tokenizer, vocab_size=config.vocab_size, **kwargs)

    @property
    def policy_version(self) -> int:
        return self._policy_version

    @property
    def tokens_generated(self) -> int:
        return self._tokens

    async def start(self) -> None:
        self._running = True

    async def stop(self) -> None:
        self._running = False

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        self._policy_version = policy_version
        if interrupt:
            self._in_flight_version = policy_version

    def _pool(self, prompt: list[int]) -> tuple[list[int], bytes]:
        """A call's candidate pool (the prompt's ordinary tokens, each once) and the key
        its rotations are hashed from; computed once per call, not per token."""
        pool = list(dict.fromkeys(t for t in prompt if t not in self._special)) or self._fallback
        return pool, str(prompt[-32:]).encode()

    @staticmethod
    def _candidates(pool: tuple[list[int], bytes], step: int) -> list[int]:
        tokens, key = pool
        digest = hashlib.blake2b(key + b":%d" % step, digest_size=8).digest()
        start = int.from_bytes(digest, "little") % len(tokens)
        k = min(CANDIDATES, len(tokens))
        return [tokens[(start + j) % len(tokens)] for j in range(k)]

    def _grammar_candidates(self, matcher: Any, pool: tuple[list[int], bytes], step: int) -> list[int]:
        allowed = self._grammar.allowed(matcher)  # type: ignore[union-attr]
        if any(t in self.eos_token_ids for t in allowed):
            return [self.eos_token_ids[0]]
        ok = set(allowed)
        base = self._candidates(pool, step)
        cands = [t for t in base if t in ok]
        if cands:
            return cands
        start = base[0] % len(allowed)
        return [allowed[(start + j) % len(allowed)] for j in range(min(CANDIDATES, len(allowed)))]

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        prompt = check_resolved(self, prompt_ids, params)
        if not self._running:
            raise unavailable(Reason.SHUTTING_DOWN, f"engine {self.name!r} is not running")
        version = self._policy_version
        started_after = self._in_flight_version  # interrupting syncs before this call don't count
        spans = Spans()
        rng = None
        if params.temperature > 0:
            rng = random.Random(params.seed if params.seed is not None else secrets.randbits(63))
        stop_ids = frozenset(params.stop_token_ids) | frozenset(self.eos_token_ids)
        stream = TextStream(self.tokenizer, prompt, tuple(params.stop))
        matcher = None
        if params.structural_tag:
            if self._grammar is None:
                self._grammar = GrammarCompiler(self.tokenizer, self.vocab_size, self.eos_token_ids)
            matcher = self._grammar.matcher(params.structural_tag)
        limit = min(params.max_tokens, self.max_model_len - len(prompt))
        pool = self._pool(prompt)
        ids: list[int] = []
        lps: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        reason: FinishReason | None = None
        while reason is None:
            if self.token_delay_s:
                await asyncio.sleep(self.token_delay_s)
            elif len(ids) % STREAM_INTERVAL == 0:
                # Other callers get to run between bursts of tokens, as they do between a
                # real engine's steps; a pass of the event loop per token cost ~0.7 ms
                # of server CPU per call at concurrency 1 (gateway_load: 2.4 -> 1.7 ms).
                await asyncio.sleep(0)
            if not self._running:
                reason = "abort"
                break
            step = len(ids)
            if self._in_flight_version != started_after:  # an interrupting sync: next token on
                version = started_after = self._in_flight_version
            spans.at(version, step)
            cands = []
            if matcher is not None:
                cands = self._grammar_candidates(matcher, pool, step)
            if (matcher is None and step >= self.reply_tokens) or self.eos_token_ids[0] in cands:
                token, lp, alts = self.eos_token_ids[0], 0.0, [(self.eos_token_ids[0], 0.0)]
            else:
                cands = cands or self._candidates(pool, step)
                lp = -math.log(len(cands))
                if rng is None:
                    token = cands[0]
                else:
                    token = rng.choice(cands[: max(1, math.ceil(params.top_p * len(cands)))])
                alts = [(t, lp) for t in cands]
            if matcher is not None and not matcher.is_terminated():
                matcher.accept_token(token)
            ids.append(token)
            lps.append(lp)
            top = alts[: params.top_logprobs]
            if params.top_logprobs:
                tops.append(top)
            self._tokens += 1
            at_limit = len(ids) >= limit
            if token in stop_ids:
                text = stream.push(None, final=True)
                reason = "stop"
            else:
                text = stream.push(token, final=at_limit)
                reason = "stop" if stream.stopped else "length" if at_limit else None
            yield GenerationChunk([token], [lp], text, [top] if params.top_logprobs else [])
        yield GenerationOutput(
            prompt_ids=prompt,
            completion_ids=ids,
            logprobs=lps,
            text=stream.text,
            finish_reason=reason,
            policy_version=version,
            top_logprobs=tops,
            version_spans=spans.spans(len(ids)),
            grammar=grammar_json(params.structural_tag, self.eos_token_ids, self.vocab_size),
        )
