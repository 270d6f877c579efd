"""What every generating endpoint shares: running `n` choices, sampling, token text.

Each choice is one `EpisodeRegistry.generate` call (recorded as its own call). The
choices run concurrently, so the engine batches them into one wave, and their
items are merged into one stream of (choice index, item). Errors raised before any
item (bad input, paused, episode closed) surface from `start()`, while the HTTP
status line can still carry them; later ones surface from iteration.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.resolve import SamplingRequest
from swarmrl_server.http.sse import unless_disconnected

Item = GenerationChunk | GenerationResult
_DONE = object()
SEED_MODULUS = 2**63
"""Per-choice seeds are `seed + index` modulo this (a positive int64 for every engine)."""


class Generations:
    """`n` concurrent generate streams of one request, merged."""

    def __init__(self, streams: Sequence[AsyncIterator[Item]], *, chunks: bool = True) -> None:
        """`chunks=False` (a non-streaming response): after each choice's first item, which
        `start()` waits for, only results travel the queue, not every chunk."""
        self._streams = list(streams)
        self._chunks = chunks
        self._queue: asyncio.Queue[tuple[int, Any]] = asyncio.Queue()
        self._tasks: list[asyncio.Task[None]] = []
        self._first: tuple[int, Any] | None = None
        self._open = len(self._streams)

    def __len__(self) -> int:
        return len(self._streams)

    async def _pump(self, index: int, stream: AsyncIterator[Item]) -> None:
        try:
            first = True
            async for item in stream:
                if first or self._chunks or not isinstance(item, GenerationChunk):
                    await self._queue.put((index, item))
                first = False
            await self._queue.put((index, _DONE))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            await self._queue.put((index, exc))

    async def start(self, request: Request) -> None:
        """Starts every choice and waits for the first item; raises an early error.

        A call made while its model is paused waits here for the pause to lift (see
        `EpisodeRegistry.generate`); if `request`'s client goes away meanwhile, the wait
        ends at once (`ClientDisconnected`) instead of running on until the pause lifts."""
        self._tasks = [
            asyncio.create_task(self._pump(i, s)) for i, s in enumerate(self._streams)
        ]
        try:
            self._first = await unless_disconnected(request, self._next())
        except BaseException:
            await self.aclose()
            raise

    async def _next(self) -> tuple[int, Any]:
        index, item = await self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return index, item

    async def merged(self) -> AsyncIterator[tuple[int, Item]]:
        """(choice index, chunk or result) in arrival order; closes the choices on exit."""
        try:
            pending = self._first
            self._first = None
            while self._open:
                index, item = pending if pending is not None else await self._next()
                pending = None
                if item is _DONE:
                    self._open -= 1
                else:
                    yield index, item
        finally:
            await self.aclose()

    async def results(self) -> list[GenerationResult]:
        """Waits for every choice; the results in choice order."""
        results: dict[int, GenerationResult] = {}
        async for index, item in self.merged():
            if isinstance(item, GenerationResult):
                results[index] = item
        return [results[i] for i in range(len(self._streams))]

    async def aclose(self) -> None:
        """Cancels choices still running (the engine drops their rows; nothing is
        recorded for a call that did not finish)."""
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            # Cancelled, or its error was already handed to the consumer.
            with contextlib.suppress(BaseException):
                await task


def sampling_for_choices(
    n: int,
    *,
    temperature: float | None,
    top_p: float | None,
    max_tokens: int | None,
    stop: str | list[str] | None,
    seed: int | None,
    top_logprobs: int,
    structural_tag: str | None = None,
) -> list[SamplingRequest]:
    """One SamplingRequest per choice; choice i samples with `seed + i` so that a
    seeded request with n > 1 is reproducible yet its choices differ."""
    stops = (stop,) if isinstance(stop, str) else tuple(stop or ())
    return [
        SamplingRequest(
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, stop=stops,
            seed=None if seed is None else (seed + i) % SEED_MODULUS,
            top_logprobs=top_logprobs, structural_tag=structural_tag,
        )
        for i in range(n)
    ]


@functools.lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet, reversed: printable char -> the byte it stands for."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
          *range(ord("®"), ord("ÿ") + 1)]
    cs = list(bs)
    extra = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class TokenText:
    """Token ids as the strings and bytes OpenAI's logprobs report."""

    def __init__(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        self._special = set(getattr(tokenizer, "all_special_ids", []) or [])

    def text(self, token_id: int) -> str:
        if token_id in self._special:
            return str(self._tokenizer.convert_ids_to_tokens(token_id))
        return str(self._tokenizer.decode([token_id], clean_up_tokenization_spaces=False))

    def bytes(self, token_id: int) -> list[int]:
        """The token's exact bytes (byte-level BPE tokens may be part of a character,
        which `text` can only show as U+FFFD)."""
        piece = self._tokenizer.convert_ids_to_tokens(token_id)
        decoder = _byte_decoder()
        if isinstance(piece, str) and token_id not in self._special and all(
            ch in decoder for ch in piece
        ):
            return [decoder[ch] for ch in piece]
        return list(self.text(token_id).encode("utf-8"))


def chat_logprobs(
    tt: TokenText,
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    top: Sequence[Sequence[tuple[int, float]]],
    want_top: int,
) -> dict[str, Any]:
    """OpenAI chat `logprobs`: one entry per generated token (the stop token included,
    so entries line up with `token_ids`)."""

    def entry(t: int, lp: float) -> dict[str, Any]:
        return {"token": tt.text(t), "logprob": lp, "bytes": tt.bytes(t)}

    content = []
    for i, (t, lp) in enumerate(zip(token_ids, logprobs)):
        e = entry(t, lp)
        alts = top[i] if i < len(top) else []
        e["top_logprobs"] = [entry(a, alp) for a, alp in alts[:want_top]]
        content.append(e)
    return {"content": content, "refusal": None}
