"""`OpenAIServingChat`: chat completions through the episode registry, token-exact.

The messages are rendered with the model's chat template by the registry, which
extends the episode's earlier call token for token when the messages continue it
(see episodes/render.py). Tool calls come back in the template's documented
`<tool_call>` format and are parsed by `ReplyParser`, the same parser for whole
replies and for streams, so a streamed reply reassembles to exactly the message
that was recorded (and that the next turn must send back to stay on one timeline).
The pipeline (episode, choices, errors, the stream's lifecycle) is `http.serving`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, make_message
from swarmrl_server.hosting import ModelHost
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
from swarmrl_server.http.errors import HttpError, openai_stream_error
from swarmrl_server.http.generation import TokenText, chat_logprobs, sampling_for_choices
from swarmrl_server.http.protocol import Usage
from swarmrl_server.http.serving import (
    ChoiceState,
    Piece,
    Plan,
    Refusal,
    ServingGeneration,
    openai_finish,
    reply_of,
    results_of,
    swarmrl_info,
)
from swarmrl_server.http.sse import sse
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.records import EpisodeRecord

REFUSALS = (
    Refusal("top_logprobs", "requires logprobs=true", lambda r: r.top_logprobs and not r.logprobs),
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
        out.append(make_message(
            m.role, content,
            tool_calls=[(c.id, c.function.name, c.function.arguments) for c in m.tool_calls or []],
            tool_call_id=m.tool_call_id or "", name=m.name or "",
        ))
    return out


def tool_calls_out(calls: list[Message]) -> list[ToolCallOut] | None:
    return [ToolCallOut(id=c["id"], function=FunctionCallOut(
        name=c["function"]["name"], arguments=c["function"]["arguments"])) for c in calls] or None


class OpenAIServingChat(ServingGeneration[ChatCompletionRequest]):
    """Serves `/v1/chat/completions` for the episode the request's key addresses."""

    door = "chat"
    refusals = REFUSALS
    stream_trailer = (sse("[DONE]"),)

    def params(self, req: ChatCompletionRequest) -> Mapping[str, str]:
        return {"sampling": "", "input.messages": "messages", "input": "messages",
                "sampling.max_tokens":
                    "max_completion_tokens" if req.max_completion_tokens else "max_tokens",
                "params.structural_tag": "response_format" if req.response_format else "tools"}

    def plan(self, req: ChatCompletionRequest, episode: EpisodeRecord,
             host: ModelHost) -> Plan[ChatCompletionRequest]:
        check_parallel_tool_calls(req.parallel_tool_calls, bool(req.tools), req.tool_choice)
        messages = to_messages(req.messages)
        parse_tools = req.tool_choice != "none"
        # tool_choice "none": the model is not shown the tools at all.
        tools = [t.model_dump(exclude_none=True) for t in req.tools or []] \
            if parse_tools else None
        samplings = sampling_for_choices(
            req.n, temperature=req.temperature, top_p=req.top_p,
            max_tokens=req.max_completion_tokens or req.max_tokens, stop=req.stop,
            seed=req.seed, top_logprobs=(req.top_logprobs or 0) if req.logprobs else 0,
            structural_tag=openai_constraint(
                [(t.function.name, t.function.parameters or {}) for t in req.tools or []],
                req.tool_choice, req.response_format),
        )
        calls = [GenerateCall(
            episode.episode_id, IN_PROCESS, model=host.name, messages=messages,
            tools=tools or None, sampling=s, request_id=(
                f"{req.request_id}/{i}" if req.n > 1 else req.request_id)
            if req.request_id else "") for i, s in enumerate(samplings)]
        return Plan(req, episode.episode_id, host, calls, self.params(req),
                    parse_tools=parse_tools,
                    forced_tool=req.tool_choice not in (None, "auto", "none"),
                    forced_name=(getattr(req.tool_choice, "function", None) or {}).get("name", ""),
                    tt=TokenText(host.tokenizer) if req.logprobs else None,
                    response_id=f"chatcmpl-{uuid.uuid4().hex}")

    def render(self, plan: Plan[ChatCompletionRequest], results: list[GenerationResult]) -> Any:
        req = plan.req
        choices = []
        for i, r in enumerate(results):
            content, calls = reply_of(plan.parse_tools, plan.forced_tool, r, plan.forced_name)
            c = r.call
            choices.append(ChatChoice(
                index=i, message=ChatMessageOut(content=content, tool_calls=tool_calls_out(calls)),
                finish_reason=openai_finish(plan.parse_tools, r),
                logprobs=chat_logprobs(plan.tt, c.completion_ids, c.logprobs, c.top_logprobs,
                                       req.top_logprobs or 0) if plan.tt else None,
                token_ids=list(c.completion_ids) if req.return_token_ids else None,
            ))
        return ChatCompletionResponse(
            id=plan.response_id, model=req.model, choices=choices,
            usage=usage_of(results),
            prompt_token_ids=list(results[0].call.prompt_ids) if req.return_token_ids else None,
            swarmrl=swarmrl_info(plan.episode_id, results),
        ).model_dump(mode="json")

    def _chunk(self, plan: Plan[ChatCompletionRequest], **fields: Any) -> ChatCompletionChunk:
        return ChatCompletionChunk(id=plan.response_id, created=plan.created,
                                   model=plan.req.model, **fields)

    def render_piece(self, plan: Plan[ChatCompletionRequest], state: ChoiceState, piece: Piece,
                     states: list[ChoiceState]) -> Iterable[str]:
        req = plan.req
        delta = ChatDelta()
        if not state.started:
            state.started = True
            delta.role, delta.content = "assistant", ""
        if piece.content:
            delta.content = (delta.content or "") + piece.content
        if piece.calls:
            delta.tool_calls = [
                ToolCallDelta(index=state.calls_sent + k, id=c["id"], type="function",
                              function=FunctionCallDelta(name=c["function"]["name"],
                                                         arguments=c["function"]["arguments"]))
                for k, c in enumerate(piece.calls)]
            state.calls_sent += len(piece.calls)
        ids, tt, r = piece.token_ids, plan.tt, piece.result
        if delta.role is None and not piece.content and not piece.calls and r is None \
                and not (req.return_token_ids and ids) and not (tt and ids):
            return ()  # text held back (a stop string or tool call may be forming)
        out = self._chunk(plan, choices=[ChatChunkChoice(
            index=state.index, delta=delta,
            finish_reason=openai_finish(plan.parse_tools, r) if r is not None else None,
            logprobs=chat_logprobs(tt, ids, piece.logprobs, piece.top_logprobs,
                                   req.top_logprobs or 0) if tt and ids else None,
            token_ids=list(ids) if req.return_token_ids else None,
        )])
        finished = [s for s in states if s.result is not None]
        if r is not None and req.return_token_ids and len(finished) == 1:
            out.prompt_token_ids = list(r.call.prompt_ids)  # with the first choice to end
        if r is not None and len(finished) == len(states):
            out.swarmrl = swarmrl_info(plan.episode_id, results_of(states))
        return (sse(out.model_dump(mode="json")),)

    def stream_close(self, plan: Plan[ChatCompletionRequest], states: list[ChoiceState]) -> Iterable[str]:
        if plan.req.stream_options and plan.req.stream_options.include_usage:
            usage = self._chunk(plan, choices=[], usage=usage_of(results_of(states)))
            return (sse(usage.model_dump(mode="json")),)
        return ()

    def stream_error(self, plan: Plan[ChatCompletionRequest], err: HttpError) -> str:
        return openai_stream_error(err)
