"""`AnthropicServingMessages`: the Anthropic Messages API over the same registry.

Anthropic messages are converted to the registry's OpenAI-shaped messages
(`tool_use` blocks -> assistant `tool_calls`, `tool_result` blocks -> `tool`
messages, `system` -> a system message), so a CLI harness that speaks Anthropic
gets the same rendering, exact-token extension and tool parsing as an OpenAI
client. Text blocks join with "" so that a reply streamed as several text blocks
and sent back verbatim is the same turn.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import (
    Message,
    ReplyParser,
    encode,
    render_text,
    validate_messages,
)
from swarmrl_server.episodes.resolve import SamplingRequest
from swarmrl_server.errors import SwarmError
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.chat_completion.serving import swarmrl_info
from swarmrl_server.http.constraints import anthropic_constraint
from swarmrl_server.http.errors import (
    HttpError,
    anthropic_stream_error,
    from_swarm_error,
    internal_error,
)
from swarmrl_server.http.generation import Generations, require_episode_model
from swarmrl_server.http.messages.protocol import (
    ContentBlock,
    CountTokensRequest,
    MessageParam,
    MessagesRequest,
    MessagesResponse,
    MessagesUsage,
    ThinkingConfig,
    ToolChoice,
    ToolParam,
)
from swarmrl_server.http.protocol import log
from swarmrl_server.http.sse import EventStreamResponse, sse, unless_disconnected
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.swarm import Swarm

PARAMS = {"sampling": "", "sampling.max_tokens": "max_tokens", "sampling.stop": "stop_sequences",
          "input.messages": "messages", "input": "messages", "params.structural_tag": "tools"}


def _text(blocks: str | list[ContentBlock] | None, where: str) -> str:
    if blocks is None or isinstance(blocks, str):
        return blocks or ""
    for j, b in enumerate(blocks):
        if b.type != "text" or b.text is None:
            raise HttpError(400, f"{where}[{j}]: only text blocks are supported here; got "
                            f"{b.type!r}", param=f"{where}[{j}].type")
    return "".join(b.text or "" for b in blocks)


def to_messages(system: str | list[ContentBlock] | None,
                messages: list[MessageParam]) -> list[Message]:
    """Anthropic messages -> the registry's OpenAI-shaped message dicts."""
    out: list[Message] = []
    if system:
        out.append({"role": "system", "content": _text(system, "system")})
    for i, m in enumerate(messages):
        where = f"messages[{i}].content"
        if isinstance(m.content, str):
            out.append({"role": m.role, "content": m.content})
            continue
        texts: list[str] = []
        calls: list[Message] = []
        results: list[Message] = []
        for j, b in enumerate(m.content):
            at = f"{where}[{j}]"
            if b.type == "text" and b.text is not None:
                texts.append(b.text)
            elif b.type == "tool_use" and m.role == "assistant":
                if not b.name:
                    raise HttpError(400, f"{at}.name: must not be empty", param=f"{at}.name")
                calls.append({"id": b.id or "", "type": "function", "function": {
                    "name": b.name, "arguments": json.dumps(b.input or {})}})
            elif b.type == "tool_result" and m.role == "user":
                if not b.tool_use_id:
                    raise HttpError(400, f"{at}.tool_use_id: is required",
                                    param=f"{at}.tool_use_id")
                results.append({"role": "tool", "tool_call_id": b.tool_use_id,
                                "content": _text(b.content, f"{at}.content")})
            else:
                raise HttpError(400, f"{at}: {b.type!r} blocks are not supported in "
                                f"{m.role} messages", param=f"{at}.type")
        # A user turn's tool results answer the previous assistant turn's calls: they
        # come first, as tool messages, then any text the user added.
        out.extend(results)
        if m.role == "assistant":
            msg: Message = {"role": "assistant", "content": "".join(texts)}
            if calls:
                msg["tool_calls"] = calls
            out.append(msg)
        elif texts or not results:
            out.append({"role": "user", "content": "".join(texts)})
    return out


def to_tools(tools: list[ToolParam] | None, choice: ToolChoice | None,
             thinking: ThinkingConfig | None) -> tuple[list[Message] | None, bool]:
    """(tools for the template, whether to parse tool calls); refuses what we can't do."""
    if thinking is not None and thinking.type != "disabled":
        raise HttpError(400, "thinking: extended thinking is not supported by this server",
                        param="thinking")
    for i, t in enumerate(tools or []):
        if t.type not in (None, "custom"):
            raise HttpError(400, f"tools[{i}].type: server tool {t.type!r} is not supported",
                            param=f"tools[{i}].type")
    if choice is not None and choice.disable_parallel_tool_use and \
            choice.type not in ("any", "tool"):
        # A forced choice is decoded as exactly one call; a free one cannot be limited.
        raise HttpError(400, "tool_choice.disable_parallel_tool_use: supported only with "
                        "type 'any' or 'tool'", param="tool_choice.disable_parallel_tool_use")
    if choice is not None and choice.type == "none":
        return None, False
    defs = [{"type": "function", "function": {
        "name": t.name, **({"description": t.description} if t.description else {}),
        "parameters": t.input_schema}} for t in tools or []]
    return defs or None, True


class AnthropicServingMessages:
    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth

    async def create(self, req: MessagesRequest, raw: Request) -> Any:
        episode = await self.auth.open_episode(raw)
        try:
            require_episode_model(req.model, episode.models, self.swarm.models)
            messages = to_messages(req.system, req.messages)
            validate_messages(messages, "messages")
            tools, parse_tools = to_tools(req.tools, req.tool_choice, req.thinking)
            sampling = SamplingRequest(
                temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
                stop=tuple(req.stop_sequences or ()),
                structural_tag=anthropic_constraint(
                    [(t.name, t.input_schema or {}) for t in req.tools or []],
                    req.tool_choice.type if req.tool_choice else None,
                    req.tool_choice.name if req.tool_choice else None,
                ),
            )
            prompt_ids: list[int] = []
            gens = Generations([self.swarm.episodes.generate(
                episode.episode_id, model=req.model, messages=messages, tools=tools,
                sampling=sampling, input_field="input", request_id=req.request_id or "",
                on_prompt=prompt_ids.extend, caller=IN_PROCESS)], chunks=req.stream)
            await gens.start(raw)
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        if req.stream:
            # start() has rendered the prompt: message_start can carry its real size.
            return EventStreamResponse(self._stream(
                req, episode.episode_id, parse_tools, gens, len(prompt_ids)))
        try:
            [result] = await unless_disconnected(raw, gens.results())
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        c = result.call
        stop_reason, stop_sequence = self._stop(req, result)
        body = MessagesResponse(
            id=f"msg_{uuid.uuid4().hex}", model=req.model,
            content=self._blocks(result, parse_tools), stop_reason=stop_reason,
            stop_sequence=stop_sequence,
            usage=MessagesUsage(input_tokens=len(c.prompt_ids),
                                output_tokens=len(c.completion_ids)),
            prompt_token_ids=list(c.prompt_ids) if req.return_token_ids else None,
            token_ids=list(c.completion_ids) if req.return_token_ids else None,
            swarmrl=swarmrl_info(episode.episode_id, [result]),
        )
        return JSONResponse(body.model_dump(mode="json"))

    async def count_tokens(self, req: CountTokensRequest, raw: Request) -> dict[str, int]:
        """Tokens of the rendered prompt (a fresh render: the count a new call would see)."""
        episode = await self.auth.open_episode(raw)
        try:
            require_episode_model(req.model, episode.models, self.swarm.models)
            messages = to_messages(req.system, req.messages)
            validate_messages(messages, "messages")
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        tools, _ = to_tools(req.tools, req.tool_choice, req.thinking)
        tokenizer = self.swarm.models[req.model].tokenizer
        text = render_text(tokenizer, messages, tools, generation_prompt=True)
        return {"input_tokens": len(encode(tokenizer, text))}

    def _stop(self, req: MessagesRequest, r: GenerationResult) -> tuple[Any, str | None]:
        if r.finish_reason == "tool_calls":
            return "tool_use", None
        if r.finish_reason == "length":
            return "max_tokens", None
        ids = r.call.completion_ids
        engine = self.swarm.models[req.model].engine
        if not req.stop_sequences or (ids and ids[-1] in engine.eos_token_ids):
            return "end_turn", None
        # A stop string ended the text: find which (the text returned omits it).
        full = engine.tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
        tail = full[len(r.call.text):]
        hit = next((s for s in req.stop_sequences if tail.startswith(s)),
                   next((s for s in req.stop_sequences if s in tail), None))
        return ("stop_sequence", hit) if hit else ("end_turn", None)

    @staticmethod
    def _blocks(r: GenerationResult, parse_tools: bool) -> list[dict[str, Any]]:
        if not parse_tools:
            return [{"type": "text", "text": r.call.text}]
        m = r.message
        calls = m.get("tool_calls") or []
        blocks: list[dict[str, Any]] = []
        if m.get("content") or not calls:
            blocks.append({"type": "text", "text": m.get("content") or ""})
        for c in calls:
            blocks.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                           "input": json.loads(c["function"]["arguments"])})
        return blocks

    async def _stream(self, req: MessagesRequest, episode_id: str, parse_tools: bool,
                      gens: Generations, input_tokens: int) -> AsyncIterator[str]:
        msg_id = f"msg_{uuid.uuid4().hex}"
        parser = ReplyParser()
        blocks = 0  # content blocks started
        text_open = False
        fed = ""

        def text_delta(text: str) -> list[str]:
            nonlocal blocks, text_open
            if not text:
                return []
            events = []
            if not text_open:
                events.append(sse({"type": "content_block_start", "index": blocks,
                                   "content_block": {"type": "text", "text": ""}},
                                  "content_block_start"))
                text_open = True
                blocks += 1
            events.append(sse({"type": "content_block_delta", "index": blocks - 1,
                               "delta": {"type": "text_delta", "text": text}},
                              "content_block_delta"))
            return events

        def close_text() -> list[str]:
            nonlocal text_open
            if not text_open:
                return []
            text_open = False
            return [sse({"type": "content_block_stop", "index": blocks - 1},
                        "content_block_stop")]

        def tool_use(call: Message) -> list[str]:
            nonlocal blocks
            i = blocks
            blocks += 1
            fn = call["function"]
            return [*close_text(),
                    sse({"type": "content_block_start", "index": i, "content_block": {
                        "type": "tool_use", "id": call["id"], "name": fn["name"], "input": {}}},
                        "content_block_start"),
                    sse({"type": "content_block_delta", "index": i, "delta": {
                        "type": "input_json_delta", "partial_json": fn["arguments"]}},
                        "content_block_delta"),
                    sse({"type": "content_block_stop", "index": i}, "content_block_stop")]

        def feed(text: str, final: bool) -> list[str]:
            if not parse_tools:
                return text_delta(text)
            content, calls = parser.feed(text)
            events = text_delta(content)
            for call in calls:
                events += tool_use(call)
            if final:
                events += text_delta(parser.finish())
            return events

        yield sse({"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": req.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}, "message_start")
        try:
            async for _, item in gens.merged():
                if isinstance(item, GenerationChunk):
                    fed += item.text
                    for event in feed(item.text, final=False):
                        yield event
                    continue
                c = item.call
                rest = c.text[len(fed):] if c.text.startswith(fed) else ""
                events = feed(rest, final=True)
                if blocks == 0:  # like the unary reply: at least one (maybe empty) text block
                    events += [sse({"type": "content_block_start", "index": 0, "content_block":
                                    {"type": "text", "text": ""}}, "content_block_start")]
                    text_open, blocks = True, 1
                events += close_text()
                for event in events:
                    yield event
                stop_reason, stop_sequence = self._stop(req, item)
                delta: dict[str, Any] = {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                    "usage": {"input_tokens": len(c.prompt_ids),
                              "output_tokens": len(c.completion_ids)},
                    "swarmrl": swarmrl_info(episode_id, [item]).model_dump(),
                }
                if req.return_token_ids:
                    delta["prompt_token_ids"] = list(c.prompt_ids)
                    delta["token_ids"] = list(c.completion_ids)
                yield sse(delta, "message_delta")
            yield sse({"type": "message_stop"}, "message_stop")
        except SwarmError as err:
            yield anthropic_stream_error(from_swarm_error(err, PARAMS))
        except Exception as exc:  # noqa: BLE001 - the status line is sent; report in-band
            log.exception("messages_stream_failed")
            yield anthropic_stream_error(internal_error(exc))
        finally:
            await gens.aclose()  # the client may be gone: stop the engine now
