"""`OpenAIServingCompletion`: raw prompts (text or token ids) through the registry.

No chat template and no tool parsing: the text the model generated is returned as
is. Token-id prompts are the token-in path for agents that render their own
prompts; each choice is recorded as a call with exactly these ids.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.errors import SwarmError
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.completion.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from swarmrl_server.http.errors import (
    HttpError,
    from_swarm_error,
    internal_error,
    openai_stream_error,
)
from swarmrl_server.http.generation import (
    Generations,
    TokenText,
    require_episode_model,
    sampling_for_choices,
)
from swarmrl_server.http.protocol import SwarmrlInfo, Usage, log
from swarmrl_server.http.sse import EventStreamResponse, sse, unless_disconnected
from swarmrl_server.limits import check_prompt_bytes, utf8_size
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.swarm import Swarm

PARAMS = {"sampling": "", "input.token_ids": "prompt", "input": "prompt"}


def reject_unsupported(req: CompletionRequest) -> None:
    if req.echo:
        raise HttpError(400, "echo: not supported by this server", param="echo")
    if req.suffix:
        raise HttpError(400, "suffix: not supported by this server", param="suffix")
    if req.best_of not in (None, 1, req.n):
        raise HttpError(400, "best_of: only best_of == n is supported", param="best_of")


def finish_of(reason: str) -> str:
    # The registry parses tool calls for every call; a raw completion has none.
    return "stop" if reason == "tool_calls" else reason


class OpenAIServingCompletion:
    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth

    def _prompts(self, req: CompletionRequest) -> list[list[int]]:
        tokenizer = self.swarm.models[req.model].tokenizer
        p = req.prompt
        if isinstance(p, str):
            items: list[Any] = [p]
        elif p and all(isinstance(x, int) for x in p):
            items = [p]
        else:
            items = list(p)
        if not items:
            raise HttpError(400, "prompt: must not be empty", param="prompt")
        context = self.swarm.models[req.model].engine.max_model_len
        for i, x in enumerate(items):  # refused from their size before tokenizing
            if isinstance(x, str):
                where = "prompt" if len(items) == 1 else f"prompt[{i}]"
                check_prompt_bytes(utf8_size(x, where), tokenizer, context, where)
        return [
            list(tokenizer(x)["input_ids"]) if isinstance(x, str) else list(x) for x in items
        ]

    async def create(self, req: CompletionRequest, raw: Request) -> Any:
        episode = await self.auth.open_episode(raw)
        try:
            require_episode_model(req.model, episode.models, self.swarm.models)
            reject_unsupported(req)
            prompts = self._prompts(req)
            samplings = sampling_for_choices(
                req.n, temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
                stop=req.stop, seed=req.seed, top_logprobs=req.logprobs or 0,
            )
            streams = [
                self.swarm.episodes.generate(
                    episode.episode_id, model=req.model, token_ids=ids, sampling=s,
                    input_field="input",
                    request_id=f"{req.request_id}/{p}/{i}" if req.request_id else "", caller=IN_PROCESS)
                for p, ids in enumerate(prompts) for i, s in enumerate(samplings)
            ]
            gens = Generations(streams, chunks=req.stream)
            await gens.start(raw)
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        if req.stream:
            return EventStreamResponse(self._stream(req, episode.episode_id, gens))
        try:
            results = await unless_disconnected(raw, gens.results())
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        tt = TokenText(self.swarm.models[req.model].tokenizer)
        choices = [
            CompletionChoice(
                index=i, text=r.call.text, finish_reason=finish_of(r.finish_reason),  # type: ignore[arg-type]
                logprobs=self._logprobs(req, tt, r.call.completion_ids, r.call.logprobs,
                                        r.call.top_logprobs, 0),
                prompt_token_ids=list(r.call.prompt_ids) if req.return_token_ids else None,
                token_ids=list(r.call.completion_ids) if req.return_token_ids else None,
            )
            for i, r in enumerate(results)
        ]
        body = CompletionResponse(
            id=f"cmpl-{uuid.uuid4().hex}", model=req.model, choices=choices,
            usage=_usage(results, req.n), swarmrl=_info(episode.episode_id, results),
        )
        return JSONResponse(body.dump())

    @staticmethod
    def _logprobs(req: CompletionRequest, tt: TokenText, ids: Sequence[int],
                  lps: Sequence[float], tops: Sequence[Sequence[tuple[int, float]]],
                  offset: int) -> CompletionLogprobs | None:
        if req.logprobs is None:
            return None
        tokens = [tt.text(t) for t in ids]
        offsets, at = [], offset
        for tok in tokens:
            offsets.append(at)
            at += len(tok)
        return CompletionLogprobs(
            tokens=tokens, token_logprobs=list(lps), text_offset=offsets,
            top_logprobs=[
                {tt.text(a): alp for a, alp in (tops[i] if i < len(tops) else [])}
                for i in range(len(ids))
            ] if req.logprobs else None,
        )

    async def _stream(self, req: CompletionRequest, episode_id: str,
                      gens: Generations) -> AsyncIterator[str]:
        tt = TokenText(self.swarm.models[req.model].tokenizer)
        stream_id, created = f"cmpl-{uuid.uuid4().hex}", int(time.time())
        results: dict[int, GenerationResult] = {}
        fed: dict[int, str] = {}
        sent: dict[int, int] = {}
        total = len(gens)

        def chunk(index: int, text: str, ids: Sequence[int], lps: Sequence[float],
                  tops: Sequence[Any], finish: str | None, prompt: Sequence[int] | None
                  ) -> CompletionResponse:
            sent[index] = sent.get(index, 0) + len(ids)
            choice = CompletionChoice(
                index=index, text=text, finish_reason=finish,  # type: ignore[arg-type]
                logprobs=self._logprobs(req, tt, ids, lps, tops, len(fed.get(index, ""))),
                prompt_token_ids=list(prompt) if prompt is not None else None,
                token_ids=list(ids) if req.return_token_ids else None,
            )
            return CompletionResponse(id=stream_id, created=created, model=req.model,
                                      choices=[choice])

        try:
            async for index, item in gens.merged():
                if isinstance(item, GenerationChunk):
                    if not item.text and not req.return_token_ids and req.logprobs is None:
                        continue
                    out = chunk(index, item.text, item.token_ids, item.logprobs,
                                item.top_logprobs, None, None)
                    fed[index] = fed.get(index, "") + item.text
                else:
                    results[index] = item
                    c = item.call
                    done_text = fed.get(index, "")
                    rest = c.text[len(done_text):] if c.text.startswith(done_text) else ""
                    k = sent.get(index, 0)
                    out = chunk(index, rest, c.completion_ids[k:], c.logprobs[k:],
                                c.top_logprobs[k:], finish_of(item.finish_reason),
                                c.prompt_ids if req.return_token_ids else None)
                    if len(results) == total:
                        out.swarmrl = _info(episode_id, [results[i] for i in range(total)])
                yield sse(out.dump())
            if req.stream_options and req.stream_options.include_usage:
                usage = CompletionResponse(id=stream_id, created=created, model=req.model,
                                           choices=[],
                                           usage=_usage([results[i] for i in range(total)], req.n))
                yield sse(usage.dump())
        except SwarmError as err:
            yield openai_stream_error(from_swarm_error(err, PARAMS))
        except Exception as exc:  # noqa: BLE001 - the status line is sent; report in-band
            log.exception("completion_stream_failed")
            yield openai_stream_error(internal_error(exc))
        finally:
            await gens.aclose()  # the client may be gone: stop the engine now
        yield sse("[DONE]")


def _usage(results: list[GenerationResult], n: int) -> Usage:
    # Choices are grouped by prompt (n per prompt); like OpenAI, count each prompt once.
    prompt = sum(len(r.call.prompt_ids) for r in results[::n])
    completion = sum(len(r.call.completion_ids) for r in results)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)


def _info(episode_id: str, results: list[GenerationResult]) -> SwarmrlInfo:
    return SwarmrlInfo(
        episode_id=episode_id, call_ids=[r.call.call_id for r in results],
        policy_version=results[0].call.policy_version, overridden=results[0].overridden,
        version_spans=[r.call.spans() for r in results],
    )
