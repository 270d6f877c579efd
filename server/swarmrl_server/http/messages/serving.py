"""`AnthropicServingMessages`: the Anthropic Messages API over the same registry.

Requests become the registry's chat messages (`blocks.py`), so an Anthropic client gets
the same rendering, exact-token extension and tool parsing as an OpenAI one. Streams
follow Anthropic's event sequence: `message_start` (with the rendered prompt's real
size), content blocks (text as it streams; a `tool_use` block per call, whole once its
`<tool_call>` closes), `message_delta` with the stop reason and `message_stop`. The
pipeline (episode, choices, errors, the stream's lifecycle) is `http.serving`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from fastapi import Request

from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, encode, render_text, validate_messages
from swarmrl_server.episodes.resolve import SamplingRequest
from swarmrl_server.errors import SwarmError
from swarmrl_server.hosting import ModelHost
from swarmrl_server.http.constraints import anthropic_constraint
from swarmrl_server.http.errors import HttpError, anthropic_stream_error, from_swarm_error
from swarmrl_server.http.messages.blocks import content_blocks, to_messages, to_tools
from swarmrl_server.http.messages.protocol import (
    CountTokensRequest,
    MessagesRequest,
    MessagesResponse,
    MessagesUsage,
)
from swarmrl_server.http.serving import (
    ChoiceState,
    Piece,
    Plan,
    ServingGeneration,
    reply_of,
    swarmrl_info,
)
from swarmrl_server.http.sse import sse
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.records import EpisodeRecord

__all__ = ["AnthropicServingMessages", "to_messages"]

PARAMS = {"sampling": "", "sampling.max_tokens": "max_tokens", "sampling.stop": "stop_sequences",
          "input.messages": "messages", "input": "messages", "params.structural_tag": "tools"}


def event(kind: str, **fields: Any) -> str:
    return sse({"type": kind, **fields}, kind)


class AnthropicServingMessages(ServingGeneration[MessagesRequest]):
    """Serves `/v1/messages` for the episode the request's key addresses."""

    door = "messages"

    def params(self, req: MessagesRequest) -> Mapping[str, str]:
        return PARAMS

    def plan(self, req: MessagesRequest, episode: EpisodeRecord,
             host: ModelHost) -> Plan[MessagesRequest]:
        messages = to_messages(req.system, req.messages)
        tools, parse_tools = to_tools(req.tools, req.tool_choice, req.thinking)
        choice = req.tool_choice
        sampling = SamplingRequest(
            temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
            stop=tuple(req.stop_sequences or ()),
            structural_tag=anthropic_constraint(
                [(t.name, t.input_schema or {}) for t in req.tools or []],
                choice.type if choice else None, choice.name if choice else None),
        )
        calls = [GenerateCall(episode.episode_id, IN_PROCESS, model=host.name,
                              messages=messages, tools=tools, sampling=sampling,
                              request_id=req.request_id or "")]
        return Plan(req, episode.episode_id, host, calls, PARAMS, parse_tools=parse_tools,
                    forced_tool=choice is not None and choice.type in ("any", "tool"),
                    forced_name=choice.name or "" if choice and choice.type == "tool" else "",
                    response_id=f"msg_{uuid.uuid4().hex}")

    def render(self, plan: Plan[MessagesRequest], results: list[GenerationResult]) -> Any:
        [r] = results
        c = r.call
        stop_reason, stop_sequence = self._stop(plan, r)
        return MessagesResponse(
            id=plan.response_id, model=plan.req.model,
            content=content_blocks(*reply_of(plan.parse_tools, plan.forced_tool, r,
                                             plan.forced_name)),
            stop_reason=stop_reason, stop_sequence=stop_sequence,
            usage=MessagesUsage(input_tokens=len(c.prompt_ids),
                                output_tokens=len(c.completion_ids)),
            prompt_token_ids=list(c.prompt_ids) if plan.req.return_token_ids else None,
            token_ids=list(c.completion_ids) if plan.req.return_token_ids else None,
            swarmrl=swarmrl_info(plan.episode_id, [r]),
        ).model_dump(mode="json")

    async def count_tokens(self, req: CountTokensRequest, raw: Request) -> dict[str, int]:
        """Tokens of the rendered prompt (a fresh render: the count a new call would see)."""
        _, host = await self.host_for(req, raw)
        messages = to_messages(req.system, req.messages)
        try:
            validate_messages(messages, "messages")
        except SwarmError as err:
            raise from_swarm_error(err, PARAMS) from None
        tools, _ = to_tools(req.tools, req.tool_choice, req.thinking)
        text = render_text(host.tokenizer, messages, tools, generation_prompt=True)
        return {"input_tokens": len(encode(host.tokenizer, text))}

    def _stop(self, plan: Plan[MessagesRequest], r: GenerationResult) -> tuple[Any, str | None]:
        if r.finish_reason == "tool_calls":
            return "tool_use", None
        if r.finish_reason == "length":  # a cut tool call too: Anthropic's "max_tokens"
            return "max_tokens", None
        ids, stops = r.call.completion_ids, plan.req.stop_sequences
        engine = plan.host.engine
        if not stops or (ids and ids[-1] in engine.eos_token_ids):
            return "end_turn", None
        # A stop string ended the text: find which (the text returned omits it).
        full = engine.tokenizer.decode(ids, skip_special_tokens=True)  # type: ignore[attr-defined]
        tail = full[len(r.call.text):]
        hit = next((s for s in stops if tail.startswith(s)), next((s for s in stops if s in tail),
                                                                  None))
        return ("stop_sequence", hit) if hit else ("end_turn", None)

    # -- streaming -------------------------------------------------------------------

    def stream_open(self, plan: Plan[MessagesRequest]) -> Iterable[str]:
        # The plan has started: message_start can carry the prompt's real size.
        yield event("message_start", message={
            "id": plan.response_id, "type": "message", "role": "assistant",
            "model": plan.req.model, "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": len(plan.prompt_ids), "output_tokens": 0}})

    @staticmethod
    def _text(state: ChoiceState, text: str) -> list[str]:
        if not text:
            return []
        events = []
        if not state.block_open:
            events.append(event("content_block_start", index=state.blocks,
                                content_block={"type": "text", "text": ""}))
            state.block_open, state.blocks = True, state.blocks + 1
        events.append(event("content_block_delta", index=state.blocks - 1,
                            delta={"type": "text_delta", "text": text}))
        return events

    @staticmethod
    def _close_text(state: ChoiceState) -> list[str]:
        if not state.block_open:
            return []
        state.block_open = False
        return [event("content_block_stop", index=state.blocks - 1)]

    def _tool_use(self, state: ChoiceState, call: Message) -> list[str]:
        events, i, fn = self._close_text(state), state.blocks, call["function"]
        state.blocks += 1
        return [*events,
                event("content_block_start", index=i, content_block={
                    "type": "tool_use", "id": call["id"], "name": fn["name"], "input": {}}),
                event("content_block_delta", index=i, delta={
                    "type": "input_json_delta", "partial_json": fn["arguments"]}),
                event("content_block_stop", index=i)]

    def render_piece(self, plan: Plan[MessagesRequest], state: ChoiceState, piece: Piece,
                     states: list[ChoiceState]) -> Iterable[str]:
        events = self._text(state, piece.content)
        for call in piece.calls:
            events += self._tool_use(state, call)
        r = piece.result
        if r is None:
            return events
        if state.blocks == 0:  # like the unary reply: at least one (maybe empty) text block
            events.append(event("content_block_start", index=0,
                                content_block={"type": "text", "text": ""}))
            state.block_open, state.blocks = True, 1
        events += self._close_text(state)
        stop_reason, stop_sequence = self._stop(plan, r)
        c = r.call
        delta: dict[str, Any] = {
            "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"input_tokens": len(c.prompt_ids), "output_tokens": len(c.completion_ids)},
            "swarmrl": swarmrl_info(plan.episode_id, [r]).model_dump(),
        }
        if plan.req.return_token_ids:
            delta["prompt_token_ids"] = list(c.prompt_ids)
            delta["token_ids"] = list(c.completion_ids)
        return [*events, event("message_delta", **delta)]

    def stream_close(self, plan: Plan[MessagesRequest], states: list[ChoiceState]) -> Iterable[str]:
        return (event("message_stop"),)

    def stream_error(self, plan: Plan[MessagesRequest], err: HttpError) -> str:
        return anthropic_stream_error(err)
