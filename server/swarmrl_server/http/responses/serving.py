"""`OpenAIServingResponses`: the Responses API through the episode registry, token-exact.

`instructions`, the conversation of `previous_response_id` (`store.py`) and the `input`
items become chat messages (`items.py`); from there the call is a chat-completions call,
through the same pipeline (`http.serving`). One response is one recorded call; output
items carry the tool call ids recorded in its reply, streamed or not.

Streams follow the API's event sequence (`response.created`, `response.in_progress`, per
output item `output_item.added`, its part or argument events and `output_item.done`,
then `response.completed` or `response.incomplete`), numbered by `sequence_number`.
Text streams token by token; a tool call's text is held back while it forms, and its
`function_call` item comes whole after the message item (the unary `output`'s order).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse

from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.hosting import ModelHost
from swarmrl_server.http.constraints import check_parallel_tool_calls, responses_constraint
from swarmrl_server.http.errors import HttpError
from swarmrl_server.http.generation import TokenText, sampling_for_choices
from swarmrl_server.http.responses import protocol, store
from swarmrl_server.http.responses.items import conversation_of, item_id, to_messages, to_tools
from swarmrl_server.http.responses.objects import finished, settings_for
from swarmrl_server.http.responses.protocol import (
    ResponseObject,
    ResponseSettings,
    ResponsesRequest,
)
from swarmrl_server.http.serving import ChoiceState, Piece, Plan, Refusal, ServingGeneration
from swarmrl_server.http.sse import sse
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.records import EpisodeRecord


def _is_set(name: str) -> Callable[[Any], bool]:
    """Whether a request sets the field `name` (any value but None)."""
    return lambda r: getattr(r, name) is not None


REFUSALS = (
    Refusal("background", "background responses are not supported (use stream=true for "
            "long responses)", lambda r: r.background),
    *(Refusal(name, "not supported by this server", _is_set(name))
      for name in ("conversation", "prompt", "context_management")),
    Refusal("truncation", "only 'disabled' is supported (the server never drops input items)",
            lambda r: r.truncation == "auto"),
    Refusal("reasoning", "reasoning settings are not supported by this server",
            lambda r: r.reasoning and any(v is not None for v in r.reasoning.values())),
    Refusal("text.verbosity", "only 'medium' is supported",
            lambda r: r.text is not None and r.text.verbosity not in (None, "medium")),
    Refusal("text.format.schema", "required for type 'json_schema'",
            lambda r: r.text is not None and r.text.format is not None
            and r.text.format.type == "json_schema" and r.text.format.schema_ is None),
    Refusal("tool_choice", "must be 'none', 'auto', 'required' or {'type': 'function', "
            "'name': ...}", lambda r: isinstance(r.tool_choice, dict) and (
                r.tool_choice.get("type") != "function"
                or not isinstance(r.tool_choice.get("name"), str))),
    Refusal("metadata", "at most {} pairs, keys of at most {} and values of at most {} "
            "characters".format(*protocol.MAX_METADATA),
            lambda r: not protocol.metadata_fits(r.metadata)),
)


def check_lists(req: ResponsesRequest) -> None:
    """The per-entry refusals of `include` and `tools`."""
    for i, name in enumerate(req.include or []):
        if name not in protocol.KNOWN_INCLUDES:
            raise HttpError(400, f"include[{i}]: {name!r} is not supported", param=f"include[{i}]")
    for i, tool in enumerate(req.tools or []):
        if tool.type != "function":
            raise HttpError(400, f"tools[{i}].type: built-in tool {tool.type!r} is not "
                            "supported (function tools are)", param=f"tools[{i}].type")
        if not tool.name:
            raise HttpError(400, f"tools[{i}].name: required", param=f"tools[{i}].name")
    check_parallel_tool_calls(req.parallel_tool_calls, bool(req.tools), req.tool_choice)


@dataclass
class Stream:
    """A response stream's own state: its settings and the events' sequence numbers."""

    settings: ResponseSettings
    seq: Iterator[int] = field(default_factory=itertools.count)

    def event(self, kind: str, **fields: Any) -> str:
        return sse({"type": kind, "sequence_number": next(self.seq), **fields}, kind)


def stream_of(plan: Plan[ResponsesRequest]) -> Stream:
    """The response's own state, which `plan` keeps for it."""
    assert isinstance(plan.door, Stream)
    return plan.door


class OpenAIServingResponses(ServingGeneration[ResponsesRequest]):
    """Serves `/v1/responses` for the episode the request's key addresses."""

    door = "responses"
    refusals = REFUSALS

    def params(self, req: ResponsesRequest) -> Mapping[str, str]:
        fmt = req.text.format if req.text else None
        return {"sampling": "", "sampling.max_tokens": "max_output_tokens", "input": "input",
                "input.messages": "input",
                "params.structural_tag": "text.format" if fmt else "tools"}

    def plan(self, req: ResponsesRequest, episode: EpisodeRecord,
             host: ModelHost) -> Plan[ResponsesRequest]:
        check_lists(req)
        settings = settings_for(req, episode.episode_id)
        messages = [{"role": "system", "content": req.instructions}] if req.instructions else []
        if req.previous_response_id:
            prev, result = store.find(self.swarm.episodes, episode.episode_id,
                                      req.previous_response_id, "previous_response_id")
            messages += conversation_of(prev, result.call)
        new = to_messages(req.input)
        if not new and not req.previous_response_id:
            raise HttpError(400, "input: required (a string or a list of items)", param="input")
        logprobs = protocol.LOGPROBS in (req.include or [])
        [sampling] = sampling_for_choices(
            1, temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_output_tokens,
            stop=None, seed=req.seed, top_logprobs=(req.top_logprobs or 0) if logprobs else 0,
            structural_tag=responses_constraint(
                [(t["name"], t.get("parameters") or {}) for t in settings.tools],
                settings.tool_choice, settings.text["format"]),
        )
        calls = [GenerateCall(episode.episode_id, IN_PROCESS, model=host.name,
                              messages=messages + new, tools=to_tools(settings),
                              sampling=sampling, request_id=req.request_id or "",
                              annotations=store.call_annotations(settings))]
        return Plan(req, episode.episode_id, host, calls, self.params(req),
                    parse_tools=settings.parse_tools, forced_tool=settings.forced_tool,
                    forced_name=settings.forced_name,
                    tt=TokenText(host.tokenizer) if logprobs else None, door=Stream(settings))

    def _finished(self, plan: Plan[ResponsesRequest], result: GenerationResult) -> ResponseObject:
        settings = stream_of(plan).settings
        if result.replayed:  # a retried request's response is the recorded one
            settings = store.settings_of(result.call) or settings
        return finished(settings, result, plan.episode_id, plan.tt, plan.req.return_token_ids)

    def render(self, plan: Plan[ResponsesRequest], results: list[GenerationResult]) -> Any:
        return self._finished(plan, results[0]).model_dump(mode="json")

    async def retrieve(self, response_id: str, raw: Request) -> Any:
        """`GET /v1/responses/{id}`: a stored response of this episode, rebuilt from its call."""
        episode = await self.auth.open_episode(raw)
        settings, result = store.find(self.swarm.episodes, episode.episode_id, response_id,
                                      "response_id")
        return JSONResponse(finished(settings, result, episode.episode_id).model_dump(mode="json"))

    # -- streaming -------------------------------------------------------------------

    def stream_open(self, plan: Plan[ResponsesRequest]) -> Iterable[str]:
        s = stream_of(plan)
        head = ResponseObject(**s.settings.model_dump()).model_dump(mode="json")
        return (s.event("response.created", response=head),
                s.event("response.in_progress", response=head))

    @staticmethod
    def _open_message(s: Stream, state: ChoiceState) -> list[str]:
        if state.block_open:
            return []
        state.block_open = True
        where = {"item_id": item_id("msg", s.settings.id), "output_index": 0}
        return [s.event("response.output_item.added", output_index=0, item={
                    "type": "message", "id": where["item_id"], "role": "assistant",
                    "status": "in_progress", "content": []}),
                s.event("response.content_part.added", **where, content_index=0, part={
                    "type": "output_text", "text": "", "annotations": [], "logprobs": []})]

    def render_piece(self, plan: Plan[ResponsesRequest], state: ChoiceState, piece: Piece,
                     states: list[ChoiceState]) -> Iterable[str]:
        s = stream_of(plan)
        events = []
        if piece.content:  # tool calls come whole from the recorded reply, at the end
            events += self._open_message(s, state)
            events.append(s.event("response.output_text.delta",
                                  item_id=item_id("msg", s.settings.id), output_index=0,
                                  content_index=0, delta=piece.content, logprobs=[]))
        if piece.result is None:
            return events
        body = self._finished(plan, piece.result)
        for index, item in enumerate(body.output):
            if item["type"] == "message":
                part = item["content"][0]
                at = {"item_id": item["id"], "output_index": index, "content_index": 0}
                events += [*self._open_message(s, state),
                           s.event("response.output_text.done", **at, text=part["text"],
                                   logprobs=part["logprobs"]),
                           s.event("response.content_part.done", **at, part=part),
                           s.event("response.output_item.done", output_index=index, item=item)]
                continue
            at = {"item_id": item["id"], "output_index": index}
            events += [s.event("response.output_item.added", output_index=index,
                               item={**item, "arguments": "", "status": "in_progress"}),
                       s.event("response.function_call_arguments.delta", **at,
                               delta=item["arguments"]),
                       s.event("response.function_call_arguments.done", **at,
                               arguments=item["arguments"]),
                       s.event("response.output_item.done", output_index=index, item=item)]
        kind = "response.incomplete" if body.status == "incomplete" else "response.completed"
        return [*events, s.event(kind, response=body.model_dump(mode="json"))]

    def stream_error(self, plan: Plan[ResponsesRequest], err: HttpError) -> str:
        s = stream_of(plan)
        return s.event("error", code=err.code, message=err.message, param=err.param)
