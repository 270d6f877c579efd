"""`OpenAIServingResponses`: the Responses API through the episode registry, token-exact.

A request's `instructions`, the conversation of its `previous_response_id` (see
`store.py`) and its `input` items become chat messages (`items.py`); from there the
call is exactly a chat-completions call: the registry renders the messages with the
chat template once, extending an earlier call's exact ids when they continue it; tool
calls are parsed by the same `ReplyParser`; forced tool choices and JSON text formats
are decoded under the same grammar (`constraints.py`). One response is one recorded
call. Output items carry the tool call ids recorded in the call's reply, streamed or
not, so the episode holds the ids the client saw.

Streams follow the API's event sequence (`response.created`, `response.in_progress`,
then per output item `output_item.added`, its content part or argument events and
`output_item.done`, then `response.completed` or `response.incomplete`), each with a
strictly increasing `sequence_number`. Text streams token by token; a tool call's
text is held back while it forms and its `function_call` item comes, whole, after the
message item (the order of the non-streamed `output`). With `include:
["message.output_text.logprobs"]` the logprobs of every generated token come on the
finished `output_text` part (deltas carry none).
"""

from __future__ import annotations

import hashlib
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, ReplyParser
from swarmrl_server.errors import SwarmError
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.chat_completion.serving import swarmrl_info
from swarmrl_server.http.constraints import check_parallel_tool_calls, responses_constraint
from swarmrl_server.http.errors import HttpError, from_swarm_error, internal_error
from swarmrl_server.http.generation import (
    Generations,
    TokenText,
    require_episode_model,
    sampling_for_choices,
)
from swarmrl_server.http.protocol import log
from swarmrl_server.http.responses import store
from swarmrl_server.http.responses.items import (
    conversation_of,
    item_id,
    output_items,
    to_messages,
    to_tools,
)
from swarmrl_server.http.responses.protocol import (
    IncompleteDetails,
    ResponseObject,
    ResponseSettings,
    ResponsesRequest,
    ResponsesUsage,
)
from swarmrl_server.http.sse import EventStreamResponse, sse, unless_disconnected
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.swarm import Swarm

LOGPROBS = "message.output_text.logprobs"
KNOWN_INCLUDES = frozenset({
    LOGPROBS,
    # Nothing to include here (no reasoning is produced, no built-in tool runs), so these
    # are honoured vacuously: harnesses that always ask for them (e.g. stateless clients
    # asking for encrypted reasoning) work unchanged.
    "reasoning.encrypted_content", "file_search_call.results", "web_search_call.results",
    "web_search_call.action.sources", "code_interpreter_call.outputs",
    "computer_call_output.output.image_url", "message.input_image.image_url",
})
Event = Callable[..., str]
"""Renders one stream event (type, fields) with the next sequence number."""
MAX_METADATA = (16, 64, 512)
"""OpenAI's metadata limits: pairs, key length, value length."""
TOOL_FIELDS = {"type", "name", "description", "parameters", "strict"}
FORMAT_FIELDS = {"type", "name", "description", "schema_", "strict"}


def reject_unsupported(req: ResponsesRequest) -> None:
    """Options we cannot honour are refused by name rather than ignored."""
    if req.background:
        raise HttpError(400, "background: background responses are not supported (use "
                        "stream=true for long responses)", param="background")
    for name in ("conversation", "prompt", "context_management"):
        if getattr(req, name) is not None:
            raise HttpError(400, f"{name}: not supported by this server", param=name)
    if req.truncation == "auto":
        raise HttpError(400, "truncation: only 'disabled' is supported (the server never "
                        "drops input items)", param="truncation")
    if req.reasoning and any(v is not None for v in req.reasoning.values()):
        raise HttpError(400, "reasoning: reasoning settings are not supported by this server",
                        param="reasoning")
    if req.text is not None:
        if req.text.verbosity not in (None, "medium"):
            raise HttpError(400, "text.verbosity: only 'medium' is supported",
                            param="text.verbosity")
        fmt = req.text.format
        if fmt is not None and fmt.type == "json_schema" and fmt.schema_ is None:
            raise HttpError(400, "text.format.schema: required for type 'json_schema'",
                            param="text.format.schema")
    for i, name in enumerate(req.include or []):
        if name not in KNOWN_INCLUDES:
            raise HttpError(400, f"include[{i}]: {name!r} is not supported",
                            param=f"include[{i}]")
    for i, tool in enumerate(req.tools or []):
        if tool.type != "function":
            raise HttpError(400, f"tools[{i}].type: built-in tool {tool.type!r} is not "
                            "supported (function tools are)", param=f"tools[{i}].type")
        if not tool.name:
            raise HttpError(400, f"tools[{i}].name: required", param=f"tools[{i}].name")
    choice = req.tool_choice
    if isinstance(choice, dict) and (choice.get("type") != "function"
                                     or not isinstance(choice.get("name"), str)):
        raise HttpError(400, "tool_choice: must be 'none', 'auto', 'required' or "
                        "{'type': 'function', 'name': ...}", param="tool_choice")
    check_parallel_tool_calls(req.parallel_tool_calls, bool(req.tools), choice)
    pairs, key_len, value_len = MAX_METADATA
    meta = req.metadata or {}
    if len(meta) > pairs or any(len(k) > key_len or len(v) > value_len for k, v in meta.items()):
        raise HttpError(400, f"metadata: at most {pairs} pairs, keys of at most {key_len} "
                        f"and values of at most {value_len} characters", param="metadata")


def response_id(episode_id: str, request_id: str | None) -> str:
    """A new response's id; a retried request (same `request_id`) gets the same one."""
    if not request_id:
        return f"resp_{uuid.uuid4().hex}"
    return "resp_" + hashlib.sha256(f"{episode_id}\0{request_id}".encode()).hexdigest()[:32]


def settings_for(req: ResponsesRequest, episode_id: str) -> ResponseSettings:
    """What the response will echo of `req` (and what its call keeps, see `store.py`)."""
    fmt = req.text.format if req.text else None
    text_format = fmt.model_dump(by_alias=True, exclude_none=True, include=FORMAT_FIELDS) \
        if fmt else {"type": "text"}
    return ResponseSettings(
        id=response_id(episode_id, req.request_id), model=req.model, store=req.store,
        instructions=req.instructions, previous_response_id=req.previous_response_id,
        tools=[t.model_dump(include=TOOL_FIELDS, exclude_none=True) for t in req.tools or []],
        tool_choice=req.tool_choice or "auto",
        parallel_tool_calls=req.parallel_tool_calls is not False,
        max_output_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
        top_logprobs=req.top_logprobs, metadata=req.metadata or {},
        text={"format": text_format},
    )


def finished(settings: ResponseSettings, result: GenerationResult, episode_id: str,
             tt: TokenText | None = None, token_ids: bool = False) -> ResponseObject:
    """The response object of a finished call (also what GET rebuilds from the call)."""
    c = result.call
    incomplete = result.finish_reason == "length"
    return ResponseObject(
        **settings.model_dump(), status="incomplete" if incomplete else "completed",
        completed_at=float(int(c.created_at or time.time())),
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if incomplete else None,
        output=output_items(settings, result, tt),
        usage=ResponsesUsage(input_tokens=len(c.prompt_ids), output_tokens=len(c.completion_ids),
                             total_tokens=len(c.prompt_ids) + len(c.completion_ids)),
        prompt_token_ids=list(c.prompt_ids) if token_ids else None,
        token_ids=list(c.completion_ids) if token_ids else None,
        swarmrl=swarmrl_info(episode_id, [result]),
    )


class OpenAIServingResponses:
    """Serves `/v1/responses` for the episode the request's key addresses."""

    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth

    def _messages(self, req: ResponsesRequest, episode_id: str) -> list[Message]:
        messages: list[Message] = []
        if req.instructions:
            messages.append({"role": "system", "content": req.instructions})
        if req.previous_response_id:
            prev, result = store.find(self.swarm.episodes, episode_id,
                                      req.previous_response_id, "previous_response_id")
            messages += conversation_of(prev, result.call)
        new = to_messages(req.input)
        if not new and not req.previous_response_id:
            raise HttpError(400, "input: required (a string or a list of items)", param="input")
        return messages + new

    async def create(self, req: ResponsesRequest, raw: Request) -> Any:
        episode = await self.auth.open_episode(raw)
        fmt = req.text.format if req.text else None
        params = {"sampling": "", "sampling.max_tokens": "max_output_tokens", "input": "input",
                  "input.messages": "input",
                  "params.structural_tag": "text.format" if fmt else "tools"}
        try:
            require_episode_model(req.model, episode.models, self.swarm.models)
            reject_unsupported(req)
            settings = settings_for(req, episode.episode_id)
            messages = self._messages(req, episode.episode_id)
            structural_tag = responses_constraint(
                [(t["name"], t.get("parameters") or {}) for t in settings.tools],
                settings.tool_choice, settings.text["format"])
            logprobs = LOGPROBS in (req.include or [])
            [sampling] = sampling_for_choices(
                1, temperature=req.temperature, top_p=req.top_p,
                max_tokens=req.max_output_tokens, stop=None, seed=req.seed,
                top_logprobs=(req.top_logprobs or 0) if logprobs else 0,
                structural_tag=structural_tag,
            )
            gens = Generations([self.swarm.episodes.generate(
                episode.episode_id, model=req.model, messages=messages,
                tools=to_tools(settings), sampling=sampling, input_field="input",
                request_id=req.request_id or "", annotations=store.call_annotations(settings), caller=IN_PROCESS)], chunks=req.stream)
            await gens.start(raw)
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        tt = TokenText(self.swarm.models[req.model].tokenizer) if logprobs else None
        if req.stream:
            return EventStreamResponse(
                self._stream(settings, gens, episode.episode_id, tt, req, params))
        try:
            [result] = await unless_disconnected(raw, gens.results())
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        body = finished(self._replayed(settings, result), result, episode.episode_id, tt,
                        req.return_token_ids)
        return JSONResponse(body.model_dump(mode="json"))

    async def retrieve(self, response_id: str, raw: Request) -> Any:
        """`GET /v1/responses/{id}`: a stored response of this episode, rebuilt from its call."""
        episode = await self.auth.open_episode(raw)
        settings, result = store.find(self.swarm.episodes, episode.episode_id, response_id,
                                      "response_id")
        return JSONResponse(finished(settings, result, episode.episode_id).model_dump(mode="json"))

    @staticmethod
    def _replayed(settings: ResponseSettings, result: GenerationResult) -> ResponseSettings:
        """A retried request's response is the recorded one (its creation time included)."""
        if result.replayed:
            return store.settings_of(result.call) or settings
        return settings

    async def _stream(self, settings: ResponseSettings, gens: Generations, episode_id: str,
                      tt: TokenText | None, req: ResponsesRequest,
                      params: dict[str, str]) -> AsyncIterator[str]:
        seq = itertools.count()

        def event(kind: str, **fields: Any) -> str:
            return sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

        msg_id = item_id("msg", settings.id)
        where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
        parser = ReplyParser()
        opened, fed = False, ""

        def open_message() -> list[str]:
            nonlocal opened
            if opened:
                return []
            opened = True
            return [event("response.output_item.added", output_index=0, item={
                        "type": "message", "id": msg_id, "role": "assistant",
                        "status": "in_progress", "content": []}),
                    event("response.content_part.added", **where, part={
                        "type": "output_text", "text": "", "annotations": [], "logprobs": []})]

        def delta(text: str) -> list[str]:
            if not text:
                return []
            return [*open_message(),
                    event("response.output_text.delta", **where, delta=text, logprobs=[])]

        def feed(text: str, final: bool) -> list[str]:
            if not settings.parse_tools:
                return delta(text)
            # Tool calls come whole from the recorded reply at the end (their ids are the
            # episode's); the parser only decides which text is content.
            content, _ = parser.feed(text)
            return delta(content) + (delta(parser.finish()) if final else [])

        head = ResponseObject(**settings.model_dump()).model_dump(mode="json")
        yield event("response.created", response=head)
        yield event("response.in_progress", response=head)
        try:
            async for _, item in gens.merged():
                if isinstance(item, GenerationChunk):
                    fed += item.text
                    for e in feed(item.text, final=False):
                        yield e
                    continue
                text = item.call.text
                for e in feed(text[len(fed):] if text.startswith(fed) else "", final=True):
                    yield e
                body = finished(self._replayed(settings, item), item, episode_id, tt,
                                req.return_token_ids)
                for e in self._item_events(body.output, event, open_message):
                    yield e
                kind = "response.incomplete" if body.status == "incomplete" else \
                    "response.completed"
                yield event(kind, response=body.model_dump(mode="json"))
        except SwarmError as err:
            yield self._error(event, from_swarm_error(err, params))
        except Exception as exc:  # noqa: BLE001 - the status line is sent; report in-band
            log.exception("responses_stream_failed")
            yield self._error(event, internal_error(exc))
        finally:
            await gens.aclose()  # the client may be gone: stop the engine now

    @staticmethod
    def _item_events(output: list[dict[str, Any]], event: Event,
                     open_message: Callable[[], list[str]]) -> list[str]:
        """The events that finish the message item (opened while its text streamed, or
        now when it is empty) and carry each function call item."""
        events: list[str] = []
        for index, item in enumerate(output):
            if item["type"] == "message":
                part = item["content"][0]
                at = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events += open_message()
                events += [event("response.output_text.done", **at, text=part["text"],
                                 logprobs=part["logprobs"]),
                           event("response.content_part.done", **at, part=part),
                           event("response.output_item.done", output_index=index, item=item)]
                continue
            at = {"item_id": item["id"], "output_index": index}
            events += [event("response.output_item.added", output_index=index,
                             item={**item, "arguments": "", "status": "in_progress"}),
                       event("response.function_call_arguments.delta", **at,
                             delta=item["arguments"]),
                       event("response.function_call_arguments.done", **at,
                             arguments=item["arguments"]),
                       event("response.output_item.done", output_index=index, item=item)]
        return events

    @staticmethod
    def _error(event: Event, err: HttpError) -> str:
        return event("error", code=err.code, message=err.message, param=err.param)
