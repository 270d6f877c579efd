"""`HFEngine`: a transformers model served on CPU, with concurrent calls batched in waves.

One scheduler thread owns the model (torch work must never block the asyncio
loop of the gRPC server). It takes every waiting request (up to
`max_batch_size`) as a *wave*, prefills the prompts (left-padded, in length
buckets) and then decodes token by token with the KV cache (`hf.batch.Batch`). Each
new token is streamed to its caller's asyncio queue with `loop.call_soon_threadsafe`.
Rows that finish, or whose caller went away, leave the batch (and the cache) at once,
so they cost nothing more; requests that arrive meanwhile are prefilled and join the
running wave after its next decode step (continuous batching), up to `max_batch_size`.

Weights change only between waves. A plain update waits for the wave to end (no row
joins a wave while an update waits, so it drains), and all tokens of one call come
from one policy version. An interrupting one (`interrupt=True`,
the trainer's weight_sync=interrupt) ends the wave at the next token boundary instead:
its unfinished rows go back to the front of the queue with their whole state (text
stream, generator, grammar matcher, tokens so far), the update applies, and the next
wave prefills each row's prompt + tokens and carries on under the new version (a new
span in the call's `version_spans`). Only the re-prefill is extra work; the sampling
and text state continue as if nothing happened, so a resume on unchanged weights gives
the same tokens. LoRA adapters too (`hf.adapters`): one copy of the base serves every
model's adapter, each with its own policy version.

Logprobs: for temperature T > 0 a token's logprob is log_softmax(logits / T) at
that token, i.e. under the tempered distribution *before* top-p truncation
(what a trainer recomputes from a plain forward pass); for T == 0 (greedy) it
is log_softmax(logits). `top_logprobs` come from the same distribution. Those are not
the nucleus's, which drew the token: a trainable model is never asked for top_p < 1
(`episodes.resolve.check_trained_sampling`, the rule of every engine).

Threads: we leave torch's global thread settings alone; the scheduler thread
uses torch's intra-op pool like any other caller.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import secrets
import threading
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from swarmrl_server.engine.adapter import Adapter
from swarmrl_server.engine.base import (
    Engine,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    SyncTimes,
    check_resolved,
    join_chunks,
)
from swarmrl_server.engine.grammar import GrammarCompiler, grammar_json
from swarmrl_server.engine.hf.adapters import HFAdapters
from swarmrl_server.engine.hf.attention import use_gqa_sdpa
from swarmrl_server.engine.hf.batch import Batch, plain_cache
from swarmrl_server.engine.hf.rows import Row, emit, sample_step
from swarmrl_server.engine.text import TextStream, end_of_turn_ids
from swarmrl_server.errors import Reason, internal, invalid, unavailable

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase



@dataclass(frozen=True)
class EngineStats:
    """A snapshot of the scheduler's counters."""

    waves: int
    """Waves (batched prefill + decode loops) started."""
    wave_sizes: tuple[int, ...]
    """Rows in each of the most recent waves (at most 1000), oldest first."""
    admitted: int
    """Rows that joined a running wave (not counted in `wave_sizes`)."""
    steps: int
    """Decode steps (batched forward passes after the prefill)."""
    tokens_generated: int
    active_rows: int
    """Rows in the wave running now."""
    waiting: int
    """Requests waiting for the next wave."""


@dataclass(eq=False)
class _WeightUpdate:
    state_dict: Mapping[str, torch.Tensor]
    policy_version: int
    adapter: tuple[str, Adapter] | None = None
    """A LoRA adapter to load under a model's name instead of base weights."""
    interrupt: bool = False
    """Stop the running wave at a token boundary for it (else it waits for the wave)."""
    queued_at: float = field(default_factory=time.perf_counter)
    done: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)


class HFEngine(Engine):
    """Serves a transformers causal LM on CPU, batching concurrent calls in waves."""

    def __init__(
        self,
        name: str,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        *,
        max_batch_size: int = 32,
        max_model_len: int | None = None,
        batch_window_s: float = 0.005,
    ) -> None:
        """`batch_window_s`: how long an idle scheduler waits, after the first request
        arrives, for others to join its wave (calls made "at the same time" by one
        event loop reach the scheduler microseconds apart)."""
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        self.name = name
        self.model = model.eval()
        use_gqa_sdpa(self.model)  # grouped kv heads read in place (engine.hf.attention)
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.batch_window_s = batch_window_s
        context = getattr(model.config, "max_position_embeddings", None)
        self.max_model_len = int(max_model_len or context or 2048)
        embeddings: torch.nn.Embedding = model.get_input_embeddings()  # type: ignore[assignment]
        self.vocab_size = int(embeddings.num_embeddings)
        self.eos_token_ids = self._end_of_turn_ids()
        self._joinable = plain_cache(model)
        """Rows may join a running wave, and a wave prefills in buckets (`hf.batch`)."""
        pad = tokenizer.pad_token_id
        self._pad_id = int(pad) if pad is not None else self.eos_token_ids[0]

        self._policy_version = 0
        self._adapters = HFAdapters()
        self._cond = threading.Condition()  # guards the fields below
        self._waiting: collections.deque[Row] = collections.deque()
        self._updates: list[_WeightUpdate] = []
        self._thread: threading.Thread | None = None
        self._stopping = False
        # Held while the model runs or changes; lets update_weights work without the thread.
        self._model_lock = threading.Lock()
        self._waves = 0
        self._wave_sizes: collections.deque[int] = collections.deque(maxlen=1000)
        self._admitted = 0
        self._steps = 0
        self._tokens = 0
        self._active = 0
        self._grammar: GrammarCompiler | None = None
        self._interrupting = False
        """An interrupting update waits: the running wave ends at its next token."""
        self._applied_at = 0.0
        self._last_sync: SyncTimes | None = None
        """Where the last weight update's time went (`resume_s` fills in when the rows it
        interrupted produce their next token)."""

    @classmethod
    def from_pretrained(cls, name: str, path: Path | str, **kwargs: Any) -> HFEngine:
        """Loads a local checkpoint (see `swarmrl_server.models.load_model`)."""
        from swarmrl_server.models import load_model

        model, tokenizer = load_model(Path(path))
        return cls(name, model, tokenizer, **kwargs)

    def _end_of_turn_ids(self) -> tuple[int, ...]:
        gen_eos = getattr(getattr(self.model, "generation_config", None), "eos_token_id", None)
        return end_of_turn_ids(self.tokenizer, gen_eos)

    # ---- public API -------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._policy_version

    def adapter_version(self, name: str) -> int:
        return self._adapters.versions.get(name, 0)

    @property
    def stats(self) -> EngineStats:
        with self._cond:
            return EngineStats(
                waves=self._waves,
                wave_sizes=tuple(self._wave_sizes),
                admitted=self._admitted,
                steps=self._steps,
                tokens_generated=self._tokens,
                active_rows=self._active,
                waiting=len(self._waiting),
            )

    async def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(
                target=self._run, name=f"hf-engine-{self.name}", daemon=True
            )
            self._thread.start()

    async def stop(self) -> None:
        with self._cond:
            thread = self._thread
            if thread is None:
                return
            self._stopping = True
            self._cond.notify_all()
        await asyncio.to_thread(thread.join)
        with self._cond:
            self._thread = None

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        await self._update(_WeightUpdate(state_dict, policy_version, interrupt=interrupt))

    async def load_adapter(self, name: str, adapter: Adapter, policy_version: int, *,
                           interrupt: bool = False) -> None:
        """Loads (or adds) the LoRA adapter `name` between waves (`engine.adapter`);
        `interrupt`: the running wave stops for it (its rows resume after the load)."""
        await self._update(_WeightUpdate(adapter.tensors, policy_version, (name, adapter),
                                         interrupt=interrupt))

    async def _update(self, update: _WeightUpdate) -> None:
        with self._cond:
            running = self._thread is not None and not self._stopping
            if running:
                self._updates.append(update)
                self._interrupting = self._interrupting or update.interrupt
                self._cond.notify_all()
        if not running:
            await asyncio.to_thread(self._apply_update, update)
        await asyncio.wrap_future(update.done)

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        request = self._new_request(prompt_ids, params)
        with self._cond:
            if self._thread is None or self._stopping:
                raise unavailable(Reason.SHUTTING_DOWN, f"engine {self.name!r} is not running")
            self._waiting.append(request)
            self._cond.notify_all()
        try:
            pending: list[object] = []
            while True:
                item = pending.pop(0) if pending else await request.queue.get()
                # A consumer that fell behind gets the tokens queued meanwhile as one
                # chunk: one message per token would only make it fall further behind.
                while isinstance(item, GenerationChunk) and not request.queue.empty():
                    nxt = request.queue.get_nowait()
                    if not isinstance(nxt, GenerationChunk):
                        pending.append(nxt)
                        break
                    item = join_chunks(item, nxt)
                if isinstance(item, BaseException):
                    raise item
                yield item  # type: ignore[misc]
                if isinstance(item, GenerationOutput):
                    return
        finally:
            request.cancelled = True  # no-op once finished; frees the row otherwise

    # ---- validation -------------------------------------------------------------

    def _new_request(self, prompt_ids: Sequence[int], params: SamplingParams) -> Row:
        prompt = check_resolved(self, prompt_ids, params)
        matcher = None
        if params.structural_tag:
            if self._grammar is None:
                self._grammar = GrammarCompiler(self.tokenizer, self.vocab_size, self.eos_token_ids)
            matcher = self._grammar.matcher(params.structural_tag)
        generator = None
        if params.temperature > 0:
            # Every sampled row has its own generator, so its draws don't depend on
            # what else is in the batch; a seeded row is thus reproducible.
            seed = params.seed if params.seed is not None else secrets.randbits(63)
            generator = torch.Generator().manual_seed(seed)
        return Row(
            prompt_ids=prompt,
            params=params,
            stop_ids=frozenset(params.stop_token_ids) | frozenset(self.eos_token_ids),
            loop=asyncio.get_running_loop(),
            queue=asyncio.Queue(),
            stream=TextStream(self.tokenizer, prompt, tuple(params.stop)),
            generator=generator,
            matcher=matcher,
            grammar=grammar_json(params.structural_tag, self.eos_token_ids, self.vocab_size),
        )

    # ---- scheduler thread -------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._waiting or self._updates or self._stopping):
                    self._cond.wait()
                if self._stopping:
                    break
                updates, self._updates = self._updates, []
                self._interrupting = False
                interrupted = sum(r.resumed for r in self._waiting)
            if updates:  # between waves: the only place weights change
                taken = time.perf_counter()
                errors = [self._load(update) for update in updates]
                self._applied_at = time.perf_counter()
                self._last_sync = SyncTimes(  # before the callers hear of it
                    drain_s=taken - min(u.queued_at for u in updates),
                    reload_s=self._applied_at - taken, interrupted=interrupted)
                for update, error in zip(updates, errors):
                    _resolve(update, error)
                continue
            with self._cond:
                deadline = time.monotonic() + self.batch_window_s
                while (len(self._waiting) < self.max_batch_size and not self._stopping
                       and not self._updates):
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
                if self._updates:  # arrived in the window: it goes first
                    continue
                n = min(len(self._waiting), self.max_batch_size)
                wave = [self._waiting.popleft() for _ in range(n)]
            if wave:
                self._run_wave(wave)
        # Stopping: nothing waiting will run; pending weight updates still apply.
        with self._cond:
            waiting, self._waiting = list(self._waiting), collections.deque()
            updates, self._updates = self._updates, []
        for request in waiting:
            request.finish("abort", self._adapters.version_of(request, self._policy_version))
        for update in updates:
            self._apply_update(update)

    def _apply_update(self, update: _WeightUpdate) -> None:
        _resolve(update, self._load(update))

    def _load(self, update: _WeightUpdate) -> BaseException | None:
        """Copies `update.state_dict` into the model (or loads the adapter), all or nothing;
        returns the error for the awaiting caller."""
        try:
            if update.adapter is not None:
                with self._model_lock:
                    self.model = self._adapters.load(self.model, *update.adapter,
                                                     update.policy_version)
                return None
            with self._model_lock, torch.no_grad():
                params = self.model.state_dict()
                unknown = sorted(set(update.state_dict) - set(params))
                if unknown:
                    raise invalid("state_dict", f"unknown parameter names {unknown[:5]}")
                for key, value in update.state_dict.items():
                    if tuple(value.shape) != tuple(params[key].shape):
                        raise invalid(
                            "state_dict",
                            f"{key} has shape {tuple(value.shape)},"
                            f" expected {tuple(params[key].shape)}",
                        )
                for key, value in update.state_dict.items():
                    params[key].copy_(value)
                self._policy_version = update.policy_version
        except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
            return exc
        return None

    def _run_wave(self, wave: list[Row]) -> None:
        rows = [r for r in wave if not r.cancelled]
        if not rows:
            return
        self._start(rows)
        with self._cond:
            self._waves += 1
            self._wave_sizes.append(len(rows))
            self._active = len(rows)
        try:
            with self._model_lock:
                self._decode_wave(rows)
        except Exception as exc:  # noqa: BLE001 - a bug or OOM must not kill the scheduler
            error = internal(f"generation failed: {exc!r}")
            error.__cause__ = exc
            for row in rows:
                if not row.cancelled:  # finished rows already have their output
                    row.send(error)
        finally:
            with self._cond:
                self._active = 0

    @torch.inference_mode()
    def _decode_wave(self, rows: list[Row]) -> None:
        """Prefill + decode loop for one wave; every row ends with a GenerationOutput.

        `rows` grows by the rows admitted mid-wave (the caller answers them all if the
        wave fails)."""
        batch = Batch.prefill(self.model, list(rows), self._pad_id,
                              self._adapters.forward_kwargs, bucketed=self._joinable)
        while True:
            if self._stopping:
                for r in batch.rows:  # text held back (a partial character) is dropped
                    r.finish("abort", r.version)
                return
            tokens_B = self._sample_and_emit(batch.rows, batch.logits_B_V)
            if any(r.resumed for r in batch.rows):
                self._resumed(batch.rows)
            keep = [i for i, r in enumerate(batch.rows) if not r.cancelled]
            if not keep:
                return
            if self._interrupting:  # at a token boundary: the rest of the wave waits
                self._requeue([batch.rows[i] for i in keep])
                return
            if len(keep) < len(batch.rows):  # finished/cancelled rows leave every tensor
                batch.select(keep)
                tokens_B = tokens_B[torch.tensor(keep)]
            batch.decode(self.model, tokens_B, self._adapters.forward_kwargs(batch.rows))
            newcomers = self._admit(len(batch.rows))
            if newcomers:
                rows.extend(newcomers)
                batch.join(Batch.prefill(self.model, newcomers, self._pad_id,
                                         self._adapters.forward_kwargs))
            with self._cond:
                self._steps += 1
                self._active = len(batch.rows)

    def _admit(self, active: int) -> list[Row]:
        """Waiting rows that join the running wave now (continuous batching): up to the
        batch size, and none while a weight update waits, so that the wave drains for it."""
        if not self._joinable:
            return []
        with self._cond:
            if self._updates or self._stopping:
                return []
            n = min(len(self._waiting), self.max_batch_size - active)
            rows = [r for r in (self._waiting.popleft() for _ in range(n)) if not r.cancelled]
            self._admitted += len(rows)
        self._start(rows)
        return rows

    def _start(self, rows: list[Row]) -> None:
        """Rows starting (or resuming) on the weights loaded now: their version, and a new
        span from their next token. Loads wait for the rows (or interrupt them)."""
        for r in rows:
            r.version = self._adapters.version_of(r, self._policy_version)
            r.spans.at(r.version, len(r.completion_ids))

    def _requeue(self, rows: list[Row]) -> None:
        """Puts an interrupted wave's unfinished rows back at the front of the queue, with
        their state: they resume first, on the weights the update brings."""
        with self._cond:
            for r in reversed(rows):
                r.resumed = True
                self._waiting.appendleft(r)
            self._active = 0

    def _resumed(self, rows: list[Row]) -> None:
        """Rows back from an interruption made their first token: the sync is over."""
        for r in rows:
            r.resumed = False
        if self._last_sync is not None:
            self._last_sync.resume_s = max(self._last_sync.resume_s,
                                          time.perf_counter() - self._applied_at)

    def _sample_and_emit(
        self, rows: list[Row], logits_B_V: torch.Tensor
    ) -> torch.Tensor:
        """Samples one token per row, streams it, and marks finished rows `cancelled`.

        Returns the sampled ids (B,) for the next forward pass.
        """
        step = sample_step(rows, logits_B_V, self._grammar)
        with self._cond:  # counted before the tokens reach callers, who may read stats
            self._tokens += len(rows)
        for i, r in enumerate(rows):
            emit(r, step.tokens[i], step.logprobs[i], step.tops[i], r.version, self.max_model_len)
        return step.tokens_B


def _resolve(update: _WeightUpdate, error: BaseException | None) -> None:
    if error is None:
        update.done.set_result(None)
    else:
        update.done.set_exception(error)
