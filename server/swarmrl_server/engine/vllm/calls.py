"""One `VLLMEngine` call across its submissions to a vLLM server: what it has made so far,
how a weight sync stops it, and what it resubmits to carry on.

A call is one HTTP request until a sync interrupts it (`weight_sync=interrupt`). Then
`InFlight.interrupt` cancels the task reading its stream: the HTTP stream closes and
vLLM aborts the request (it does so for any client that goes away); tokens vLLM made
but that were not read yet are dropped, so the call holds exactly the tokens its caller
has seen. After the sync the call is submitted again (`CallState.resume_request`): the
prompt is the original prompt + those tokens, max_tokens what is left of the original
limit, and it streams on under the new version. The caller sees one stream.

What a resumed request cannot hand to vLLM, this module does itself:
  - stop strings: vLLM would only look for them in the new request's text, missing one
    that straddles the interruption. A resumed call decodes its text here instead, with
    the engines' own incremental detokenizer (`engine.text.TextStream`, fed the tokens
    so far on resume), applies the stop strings to the whole text, and cuts the tokens
    at the one that completed a stop string, as `HFEngine` does.
  - seeds: vLLM seeds a request's generator afresh. A resumed request's seed is derived
    from the call's seed and its token count: the same seed, weights and interruption
    points give the same tokens, though not the draws an uninterrupted call would make.
  - grammars: vLLM starts a request's grammar matcher from the start and takes no
    matcher state, so a constrained call (structural_tag) is never interrupted: it
    finishes on the weights it started with, and a full-weight sync waits for it
    (constrained calls are forced tool calls and response formats: short).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from swarmrl_server.engine.base import (
    FinishReason,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    Spans,
)
from swarmrl_server.engine.text import TextStream

END = object()
"""Put on a call's queue when its reader task ends (done, failed or cancelled)."""


@dataclass(eq=False)
class InFlight:
    """A submission in flight, as the engine's syncs see it."""

    adapter: str
    """The adapter it runs on ("": the base model's weights)."""
    served_name: str
    """The model name it was submitted under (an adapter version's `<model>-v<N>`)."""
    constrained: bool
    """Under a grammar: never interrupted (module docstring)."""
    reader: asyncio.Task[None] | None = None
    interrupted: bool = False

    def interrupt(self) -> None:
        """Stops the submission at the last token read (the sync resubmits it after)."""
        self.interrupted = True
        if self.reader is not None:
            self.reader.cancel()


def start_reader(client: httpx.AsyncClient, body: dict[str, Any], k: int,
                 http_error: Callable[[httpx.Response], Exception]
                 ) -> tuple[asyncio.Task[None], asyncio.Queue[Any]]:
    """A task streaming one completion request into a queue: `(chunk, finish reason or
    None)` per line, then an exception if it failed, then `END` however it ended."""
    queue: asyncio.Queue[Any] = asyncio.Queue()

    async def read() -> None:
        async with client.stream("POST", "/v1/completions", json=body) as r:
            if r.status_code != 200:
                await r.aread()
                raise http_error(r)
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    queue.put_nowait(parse_choice(json.loads(line[6:])["choices"][0], k))

    def ended(task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            queue.put_nowait(task.exception())
        queue.put_nowait(END)

    task = asyncio.get_running_loop().create_task(read())
    task.add_done_callback(ended)
    return task, queue


@dataclass
class CallState:
    """What one call has made so far, over all its submissions."""

    tokenizer: Any
    prompt: list[int]
    params: SamplingParams
    stop_ids: frozenset[int]
    limit: int
    """Most completion tokens: max_tokens, capped by the context left after the prompt."""
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    tops: list[list[tuple[int, float]]] = field(default_factory=list)
    text: str = ""
    """The text streamed to the caller so far."""
    spans: Spans = field(default_factory=Spans)
    stream: TextStream | None = None
    """Our own detokenizer, from the first resume on (module docstring)."""
    resumes: int = 0
    grammar: str = ""
    """The call's `GrammarSpec` as JSON, recorded with its output ("" unconstrained)."""

    def take(self, chunk: GenerationChunk) -> tuple[GenerationChunk, FinishReason | None]:
        """Adds a chunk vLLM streamed; returns what the caller gets and whether a stop
        string (seen here, on a resumed call) ended the call."""
        if self.stream is None:  # never interrupted: vLLM's text and stop strings
            self._add(chunk.token_ids, chunk.logprobs, chunk.top_logprobs)
            self.text += chunk.text
            return chunk, None
        pieces: list[str] = []
        reason: FinishReason | None = None
        n = 0
        for n, token in enumerate(chunk.token_ids, 1):
            at_limit = len(self.ids) + n >= self.limit
            if token in self.stop_ids:
                pieces.append(self.stream.push(None, final=True))
                reason = "stop"
            else:
                pieces.append(self.stream.push(token, final=at_limit))
                reason = "stop" if self.stream.stopped else None
            if reason is not None:
                break
        out = GenerationChunk(chunk.token_ids[:n], chunk.logprobs[:n], "".join(pieces),
                              chunk.top_logprobs[:n])
        self._add(out.token_ids, out.logprobs, out.top_logprobs)
        self.text += out.text
        return out, reason

    def _add(self, ids: list[int], lps: list[float], tops: list[list[tuple[int, float]]]) -> None:
        self.ids += ids
        self.logprobs += lps
        self.tops += tops

    def resume(self) -> tuple[str, FinishReason | None]:
        """Before resubmitting: the text our detokenizer releases beyond what vLLM had
        streamed (vLLM holds back a possible stop string's start and drops it on abort),
        and the finish reason if the tokens so far already end the call."""
        self.resumes += 1
        held = ""
        if self.stream is None:
            self.stream = TextStream(self.tokenizer, self.prompt, tuple(self.params.stop))
            released = "".join(self.stream.push(t) for t in self.ids)
            if released.startswith(self.text):
                held = released[len(self.text):]
            self.text += held
        if self.ids and self.ids[-1] in self.stop_ids:
            return held, "stop"
        if self.stream.stopped:
            return held, "stop"
        if len(self.ids) >= self.limit:
            return held, "length"
        return held, None

    def resume_request(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request that carries on: prompt + tokens so far, the tokens left, a derived
        seed, no stop strings (applied here)."""
        seed = self.params.seed
        return {
            **body,
            "prompt": self.prompt + self.ids,
            "max_tokens": self.limit - len(self.ids),
            "seed": None if seed is None else (seed * 1_000_003 + len(self.ids)) % 2**63,
            "stop": [],
        }

    def output(self, finish: FinishReason, version: int) -> GenerationOutput:
        spans = self.spans.spans(len(self.ids))
        return GenerationOutput(
            prompt_ids=self.prompt, completion_ids=self.ids, logprobs=self.logprobs,
            text=self.text, finish_reason=finish,
            policy_version=spans[-1][0] if spans else version, top_logprobs=self.tops,
            version_spans=spans, grammar=self.grammar,
        )


def parse_choice(choice: dict[str, Any], k: int) -> tuple[GenerationChunk, FinishReason | None]:
    ids = [int(t) for t in choice.get("token_ids") or []]
    lp = choice.get("logprobs") or {}
    lps = [float(x) for x in lp.get("token_logprobs") or []]
    tops: list[list[tuple[int, float]]] = []
    if k:
        for alts in lp.get("top_logprobs") or []:
            pairs = [(int(t.removeprefix("token_id:")), float(v)) for t, v in (alts or {}).items()]
            tops.append(sorted(pairs, key=lambda kv: -kv[1])[:k])
    reason = choice.get("finish_reason")
    finish: FinishReason | None = None
    if reason is not None:
        finish = reason if reason in ("stop", "length") else "abort"
    return GenerationChunk(ids, lps, choice.get("text") or "", tops), finish
