"""`OpenAIServingChat`: chat completions through the episode registry, token-exact.

The messages are rendered with the model's chat template by the registry, which
extends the episode's earlier call token for token when the messages continue it
(see episodes/render.py). Tool calls come back in the template's documented
`<tool_call>` format and are parsed by `ReplyParser`, the same parser for whole
replies and for streams, so a streamed reply reassembles to exactly the message
that was recorded (and that the next turn must send back to stay on one timeline).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, ReplyParser, make_message, validate_messages
from swarmrl_server.episodes.render import chat_of
from swarmrl_server.errors import SwarmError
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.chat_completion.protocol import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessageIn,
    ChatMessageOut,
    FunctionCallDelta,
    FunctionCallOut,
    ToolCallDelta,
    ToolCallOut,
)
from swarmrl_server.http.constraints import check_parallel_tool_calls, openai_constraint
from swarmrl_server.http.errors import (
    HttpError,
    from_swarm_error,
    internal_error,
    openai_stream_error,
)
from swarmrl_server.http.generation import (
    Generations,
    TokenText,
    chat_logprobs,
    require_episode_model,
    sampling_for_choices,
)
from swarmrl_server.http.protocol import SwarmrlInfo, Usage, log
from swarmrl_server.http.sse import EventStreamResponse, sse, unless_disconnected
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.swarm import Swarm


def fork_reason(result: GenerationResult) -> str:
    chat = chat_of(result.call) or {}
    return str(chat.get("fork_reason") or "")


def swarmrl_info(episode_id: str, results: list[GenerationResult]) -> SwarmrlInfo:
    return SwarmrlInfo(
        episode_id=episode_id, call_ids=[r.call.call_id for r in results],
        policy_version=results[0].call.policy_version, overridden=results[0].overridden,
        version_spans=[r.call.spans() for r in results],
        fork_reason=fork_reason(results[0]),
    )


def usage_of(results: list[GenerationResult]) -> Usage:
    prompt = len(results[0].call.prompt_ids)
    completion = sum(len(r.call.completion_ids) for r in results)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)


def to_messages(messages: list[ChatMessageIn]) -> list[Message]:
    """OpenAI wire messages -> the registry's message dicts (text content only)."""
    out: list[Message] = []
    for i, m in enumerate(messages):
        content = m.content
        if isinstance(content, list):
            for j, part in enumerate(content):
                if part.type != "text" or part.text is None:
                    raise HttpError(
                        400, f"messages[{i}].content[{j}]: only text parts are supported; "
                        f"got {part.type!r}", param=f"messages[{i}].content[{j}].type",
                    )
            content = "\n".join(p.text or "" for p in content)  # as vLLM joins text parts
        # "developer" is the newer name of "system" (o1 and later); templates know "system".
        msg = make_message(
            "system" if m.role == "developer" else m.role, content,
            tool_calls=[(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []],
            tool_call_id=m.tool_call_id or "", name=m.name or "",
        )
        out.append(msg)
    return out


def reject_unsupported(req: ChatCompletionRequest) -> None:
    """Options we cannot honour are refused by name rather than ignored (sampling
    settings were already refused while parsing: `http.protocol.REFUSED_UNLESS_NEUTRAL`)."""
    check_parallel_tool_calls(req.parallel_tool_calls, bool(req.tools), req.tool_choice)
    if req.top_logprobs and not req.logprobs:
        raise HttpError(400, "top_logprobs: requires logprobs=true", param="top_logprobs")


@dataclass
class _Plan:
    """A validated request, ready to run."""

    req: ChatCompletionRequest
    episode_id: str
    parse_tools: bool
    params: dict[str, str]
    """Domain field path -> request field, for error messages."""


class OpenAIServingChat:
    """Serves `/v1/chat/completions` for the episode the request's key addresses."""

    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth

    async def create(self, req: ChatCompletionRequest, raw: Request) -> Any:
        episode = await self.auth.open_episode(raw)
        max_field = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
        params = {"sampling": "", "sampling.max_tokens": max_field, "input.messages": "messages",
                  "input": "messages", "params.structural_tag":
                  "response_format" if req.response_format else "tools"}
        try:
            require_episode_model(req.model, episode.models, self.swarm.models)
            reject_unsupported(req)
            messages = to_messages(req.messages)
            validate_messages(messages, "messages")
            tools = [t.model_dump(exclude_none=True) for t in req.tools or []] or None
            parse_tools = req.tool_choice != "none"
            structural_tag = openai_constraint(
                [(t.function.name, t.function.parameters or {}) for t in req.tools or []],
                req.tool_choice, req.response_format,
            )
            samplings = sampling_for_choices(
                req.n, temperature=req.temperature, top_p=req.top_p,
                max_tokens=req.max_completion_tokens or req.max_tokens, stop=req.stop,
                seed=req.seed, top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
                structural_tag=structural_tag,
            )
            streams = [
                self.swarm.episodes.generate(
                    episode.episode_id, model=req.model, messages=messages,
                    # tool_choice "none": the model is not shown the tools at all.
                    tools=tools if parse_tools else None, sampling=s, input_field="input",
                    request_id=(f"{req.request_id}/{i}" if req.n > 1 else req.request_id)
                    if req.request_id else "", caller=IN_PROCESS)
                for i, s in enumerate(samplings)
            ]
            gens = Generations(streams, chunks=req.stream)
            await gens.start(raw)
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        plan = _Plan(req, episode.episode_id, parse_tools, params)
        if req.stream:
            return EventStreamResponse(self._stream(plan, gens))
        try:
            results = await unless_disconnected(raw, gens.results())
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        return JSONResponse(self._response(plan, results).model_dump(mode="json"))

    # -- unary ---------------------------------------------------------------------

    def _message(self, plan: _Plan, r: GenerationResult) -> tuple[ChatMessageOut, str]:
        if not plan.parse_tools:
            finish = "stop" if r.finish_reason == "tool_calls" else r.finish_reason
            return ChatMessageOut(content=r.call.text), finish
        calls = [
            ToolCallOut(id=c["id"], function=FunctionCallOut(
                name=c["function"]["name"], arguments=c["function"]["arguments"]))
            for c in r.message.get("tool_calls") or []
        ]
        return ChatMessageOut(content=r.message.get("content"), tool_calls=calls or None), \
            r.finish_reason

    def _response(self, plan: _Plan, results: list[GenerationResult]) -> ChatCompletionResponse:
        req = plan.req
        tt = TokenText(self.swarm.models[req.model].tokenizer) if req.logprobs else None
        choices = []
        for i, r in enumerate(results):
            message, finish = self._message(plan, r)
            c = r.call
            choices.append(ChatChoice(
                index=i, message=message, finish_reason=finish,
                logprobs=chat_logprobs(tt, c.completion_ids, c.logprobs, c.top_logprobs,
                                       req.top_logprobs or 0) if tt else None,
                token_ids=list(c.completion_ids) if req.return_token_ids else None,
            ))
        return ChatCompletionResponse(
            id=f"chatcmpl-{uuid.uuid4().hex}", model=req.model, choices=choices,
            usage=usage_of(results),
            prompt_token_ids=list(results[0].call.prompt_ids) if req.return_token_ids else None,
            swarmrl=swarmrl_info(plan.episode_id, results),
        )

    # -- streaming -----------------------------------------------------------------

    async def _stream(self, plan: _Plan, gens: Generations) -> AsyncIterator[str]:
        req = plan.req
        n = req.n
        tt = TokenText(self.swarm.models[req.model].tokenizer) if req.logprobs else None
        stream_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        parsers = [ReplyParser() for _ in range(n)]
        fed_text = [""] * n  # completion text seen per choice
        sent_ids = [0] * n  # completion ids already sent per choice
        n_calls = [0] * n  # tool calls already sent per choice
        started = [False] * n
        results: dict[int, GenerationResult] = {}
        prompt_ids: list[int] | None = None  # known with the first result
        prompt_ids_sent = False

        def chunk(index: int, text: str, ids: list[int], lps: list[float],
                  tops: list[Any], finish: str | None = None) -> ChatCompletionChunk | None:
            nonlocal prompt_ids_sent
            delta = ChatDelta()
            if not started[index]:
                started[index] = True
                delta.role, delta.content = "assistant", ""
            if plan.parse_tools:
                content, calls = parsers[index].feed(text)
                if finish is not None:
                    content += parsers[index].finish()
            else:
                content, calls = text, []
            if content:
                delta.content = (delta.content or "") + content
            if calls:
                delta.tool_calls = [
                    ToolCallDelta(index=n_calls[index] + k, id=c["id"], type="function",
                                  function=FunctionCallDelta(name=c["function"]["name"],
                                                             arguments=c["function"]["arguments"]))
                    for k, c in enumerate(calls)
                ]
                n_calls[index] += len(calls)
            want_ids = req.return_token_ids and ids
            if delta.role is None and not content and not calls and finish is None \
                    and not want_ids and not (tt and ids):
                return None  # text held back (a stop string or tool call may be forming)
            sent_ids[index] += len(ids)
            choice = ChatChunkChoice(
                index=index, delta=delta, finish_reason=finish,
                logprobs=chat_logprobs(tt, ids, lps, tops, req.top_logprobs or 0)
                if tt and ids else None,
                token_ids=list(ids) if req.return_token_ids else None,
            )
            out = ChatCompletionChunk(id=stream_id, created=created, model=req.model,
                                      choices=[choice])
            if req.return_token_ids and not prompt_ids_sent and prompt_ids is not None:
                out.prompt_token_ids, prompt_ids_sent = list(prompt_ids), True
            return out

        try:
            async for index, item in gens.merged():
                if isinstance(item, GenerationChunk):
                    fed_text[index] += item.text
                    c = chunk(index, item.text, item.token_ids, item.logprobs, item.top_logprobs)
                else:
                    results[index] = item
                    call = item.call
                    prompt_ids = call.prompt_ids
                    # What the chunks did not carry (all of it for a replayed call).
                    rest = call.text[len(fed_text[index]):] \
                        if call.text.startswith(fed_text[index]) else ""
                    k = sent_ids[index]
                    finish = item.finish_reason
                    if not plan.parse_tools and finish == "tool_calls":
                        finish = "stop"
                    c = chunk(index, rest, call.completion_ids[k:], call.logprobs[k:],
                              call.top_logprobs[k:], finish=finish)
                    if c is not None and len(results) == n:
                        done = [results[i] for i in range(n)]
                        c.swarmrl = swarmrl_info(plan.episode_id, done)
                if c is not None:
                    yield sse(c.model_dump(mode="json"))
            if req.stream_options and req.stream_options.include_usage:
                done = [results[i] for i in range(n)]
                usage = ChatCompletionChunk(id=stream_id, created=created, model=req.model,
                                            choices=[], usage=usage_of(done))
                yield sse(usage.model_dump(mode="json"))
        except SwarmError as err:
            yield openai_stream_error(from_swarm_error(err, plan.params))
        except Exception as exc:  # noqa: BLE001 - the status line is sent; report in-band
            log.exception("chat_stream_failed")
            yield openai_stream_error(internal_error(exc))
        finally:
            # Closing this generator early (client gone) must stop the engine now, not
            # whenever the merged stream is garbage-collected.
            await gens.aclose()
        yield sse("[DONE]")
