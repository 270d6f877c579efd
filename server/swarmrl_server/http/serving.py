"""One pipeline for the four generating doors (vLLM's `OpenAIServing` split, kept small).

A door (chat completions, completions, messages, responses) says only what its protocol
needs: how domain field paths are renamed to its request fields (`params`), a table of
the options it refuses (`refusals`), the generate calls a request makes (`plan`), and
how a streamed piece, the end of a stream and a whole response are rendered. This base
does the rest, once for all four:

- opens the episode the request's key addresses, and checks the model belongs to it
  (`EpisodeRegistry.model_of`, the one rule the gRPC door applies too);
- runs the plan's choices concurrently (`Generations`), so early errors (bad input,
  paused, over capacity) still travel on the status line;
- maps domain errors to the door's shape: as the response before the status line, as
  an in-band event after it;
- for a stream, keeps one `ChoiceState` per choice (what was fed, what was sent) and
  turns each item into a `Piece` (the new text, its ids, and, when tools are parsed,
  the content and tool calls it completes); the engine's streams are closed the moment
  the client goes away.

A forced tool call that `max_tokens` cut (`cut_call`) is reported by every door as an
incomplete tool call, never as the half-written call's text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson
from fastapi import Request
from fastapi.responses import Response

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.chat import Message, ReplyParser, cut_tool_call
from swarmrl_server.episodes.render import chat_of
from swarmrl_server.errors import SwarmError
from swarmrl_server.hosting import ModelHost
from swarmrl_server.http.auth import EpisodeAuth
from swarmrl_server.http.errors import HttpError, from_swarm_error, internal_error
from swarmrl_server.http.generation import Generations, TokenText
from swarmrl_server.http.protocol import SwarmrlInfo, log
from swarmrl_server.http.sse import ClientDisconnected, EventStreamResponse, unless_disconnected
from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.swarm import Swarm


class ModelNamed(Protocol):
    """A request that names its model (every door's, and Anthropic's count_tokens)."""

    model: str


class DoorRequest(ModelNamed, Protocol):
    """What the base reads of a generating door's request; the rest is the door's."""

    stream: bool


Req = TypeVar("Req", bound=DoorRequest)
T = TypeVar("T")


@dataclass(frozen=True)
class Refusal:
    """An option a door cannot honour: refused with a 400 naming `param` when `applies`."""

    param: str
    message: str
    applies: Callable[[Any], bool]


def refuse(req: Any, refusals: Iterable[Refusal]) -> None:
    """Options we cannot honour are refused by name rather than ignored."""
    for r in refusals:
        if r.applies(req):
            raise HttpError(400, f"{r.param}: {r.message}", param=r.param)


@dataclass
class Plan(Generic[Req]):
    """A validated request, ready to run: one `EpisodeRegistry.generate` call per choice."""

    req: Req
    episode_id: str
    host: ModelHost
    calls: list[GenerateCall]
    """Per choice, the call `generate` runs (prompt, sampling, request id...)."""
    params: Mapping[str, str]
    """Domain field path -> request field, for error messages."""
    parse_tools: bool = False
    forced_tool: bool = False
    """A tool call is forced (decoded under a grammar): a cut one is a cut call."""
    forced_name: str = ""
    """The function a named forced choice calls ("" for any of the tools)."""
    tt: TokenText | None = None
    """Set when the response reports logprobs."""
    response_id: str = ""
    created: int = field(default_factory=lambda: int(time.time()))
    prompt_ids: list[int] = field(default_factory=list)
    """The first choice's exact prompt, known once the plan has started."""
    door: object = None
    """What else the door keeps for rendering (the Responses API's settings)."""


def cut_call(forced_tool: bool, result: GenerationResult, name: str = "") -> Message | None:
    """A forced tool call that `max_tokens` cut, as an incomplete call (its arguments the
    partial JSON; `name` the named choice's); None when the call is not one."""
    if not forced_tool or result.finish_reason != "length":
        return None
    return cut_tool_call(result.call.text, result.call.call_id, name)


def reply_of(parse_tools: bool, forced_tool: bool, result: GenerationResult,
             name: str = "") -> tuple[str | None, list[Message]]:
    """(content, tool calls) of a finished choice as the doors show it."""
    if not parse_tools:
        return result.call.text, []
    cut = cut_call(forced_tool, result, name)
    if cut is not None:
        return None, [cut]
    return result.message.get("content"), list(result.message.get("tool_calls") or [])


def openai_finish(parse_tools: bool, result: GenerationResult) -> str:
    # The registry parses tool calls for every call; a reply shown raw has none.
    if not parse_tools and result.finish_reason == "tool_calls":
        return "stop"
    return result.finish_reason


@dataclass
class Piece:
    """What one streamed item adds to its choice."""

    text: str
    token_ids: Sequence[int]
    logprobs: Sequence[float]
    top_logprobs: Sequence[Any]
    offset: int
    """Characters of the choice's text before this piece."""
    content: str = ""
    """`text` less what is held back or became a tool call (all of it without tools)."""
    calls: list[Message] = field(default_factory=list)
    """Tool calls this piece completed."""
    result: GenerationResult | None = None
    """Set on a choice's last piece."""


@dataclass
class ChoiceState:
    """One choice of a stream: what was fed and sent of it, and its parser."""

    index: int
    parser: ReplyParser | None
    fed_text: str = ""
    sent_ids: int = 0
    calls_sent: int = 0
    started: bool = False
    blocks: int = 0
    """Content blocks (Anthropic) or output items (Responses) opened so far."""
    block_open: bool = False
    """A text block (or message item) is open and takes the next text."""
    result: GenerationResult | None = None

    def take(self, item: GenerationChunk | GenerationResult, plan: Plan[Any]) -> Piece:
        if isinstance(item, GenerationChunk):
            piece = Piece(item.text, item.token_ids, item.logprobs, item.top_logprobs,
                          len(self.fed_text))
        else:
            # What the chunks did not carry (all of it for a replayed call).
            self.result, c, k = item, item.call, self.sent_ids
            rest = c.text[len(self.fed_text):] if c.text.startswith(self.fed_text) else ""
            piece = Piece(rest, c.completion_ids[k:], c.logprobs[k:], c.top_logprobs[k:],
                          len(self.fed_text), result=item)
        self.fed_text += piece.text
        self.sent_ids += len(piece.token_ids)
        if self.parser is None:
            piece.content = piece.text
            return piece
        piece.content, piece.calls = self.parser.feed(piece.text)
        if piece.result is not None:
            cut = cut_call(plan.forced_tool, piece.result, plan.forced_name)
            if cut is not None:  # the held-back text is that call: never shown as text
                piece.calls = [*piece.calls, cut]
            else:
                piece.content += self.parser.finish()
        return piece


class ServingGeneration(Generic[Req]):
    """The base of every generating door (see the module doc), generic in its request:
    mypy checks each door's request to the `GenerateCall`s it makes."""

    door: ClassVar[str] = "generation"
    """The door's name in logs."""
    refusals: ClassVar[Sequence[Refusal]] = ()
    stream_trailer: ClassVar[tuple[str, ...]] = ()
    """Events after everything else, an error included (OpenAI's `[DONE]`)."""

    def __init__(self, swarm: Swarm, auth: EpisodeAuth) -> None:
        self.swarm = swarm
        self.auth = auth

    # -- what a door says ------------------------------------------------------------

    def params(self, req: Req) -> Mapping[str, str]:
        raise NotImplementedError

    def plan(self, req: Req, episode: EpisodeRecord, host: ModelHost) -> Plan[Req]:
        raise NotImplementedError

    def render(self, plan: Plan[Req], results: list[GenerationResult]) -> Any:
        """The unary response's JSON body."""
        raise NotImplementedError

    def stream_open(self, plan: Plan[Req]) -> Iterable[str]:
        return ()

    def render_piece(self, plan: Plan[Req], state: ChoiceState, piece: Piece,
                     states: list[ChoiceState]) -> Iterable[str]:
        raise NotImplementedError

    def stream_close(self, plan: Plan[Req], states: list[ChoiceState]) -> Iterable[str]:
        return ()

    def stream_error(self, plan: Plan[Req], err: HttpError) -> str:
        raise NotImplementedError

    # -- the pipeline ----------------------------------------------------------------

    async def host_for(self, req: ModelNamed, raw: Request) -> tuple[EpisodeRecord, ModelHost]:
        """The request's episode and its model (404 for a model it does not use)."""
        episode = await self.auth.open_episode(raw)
        if not req.model:
            raise HttpError(400, "model: required", param="model")
        try:
            return episode, self.swarm.episodes.model_of(episode, req.model)
        except SwarmError as err:
            raise from_swarm_error(err, {}) from None

    async def create(self, req: Req, raw: Request) -> Any:
        episode, host = await self.host_for(req, raw)
        params = self.params(req)
        try:
            refuse(req, self.refusals)
            plan = self.plan(req, episode, host)
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        if not req.stream and len(plan.calls) == 1:  # most calls: one choice, unary
            try:
                result = await cancel_on_disconnect(raw, self._only_result(plan))
            except SwarmError as err:
                raise from_swarm_error(err, params) from None
            return json_response(self.render(plan, [result]))
        try:
            gens = Generations([
                self.swarm.episodes.generate(
                    call, on_prompt=plan.prompt_ids.extend if i == 0 else None)
                for i, call in enumerate(plan.calls)
            ], chunks=req.stream)
            await gens.start(raw)
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        if req.stream:
            return EventStreamResponse(self._stream(plan, gens))
        try:
            results = await unless_disconnected(raw, gens.results())
        except SwarmError as err:
            raise from_swarm_error(err, params) from None
        return json_response(self.render(plan, results))

    async def _only_result(self, plan: Plan[Req]) -> GenerationResult:
        """The one choice's result, its stream read in this task (no pump task or queue:
        a unary call has no chunk to pass on)."""
        result: GenerationResult | None = None
        async for item in self.swarm.episodes.generate(
                plan.calls[0], on_prompt=plan.prompt_ids.extend):
            if isinstance(item, GenerationResult):
                result = item
        assert result is not None, "a call ended without a result"
        return result

    async def _stream(self, plan: Plan[Req], gens: Generations) -> AsyncIterator[str]:
        states = [ChoiceState(i, ReplyParser() if plan.parse_tools else None)
                  for i in range(len(gens))]
        for event in self.stream_open(plan):
            yield event
        try:
            async for index, item in gens.merged():
                state = states[index]
                piece = state.take(item, plan)
                for event in self.render_piece(plan, state, piece, states):
                    yield event
            for event in self.stream_close(plan, states):
                yield event
        except SwarmError as err:
            yield self.stream_error(plan, from_swarm_error(err, plan.params))
        except Exception as exc:  # noqa: BLE001 - the status line is sent; report in-band
            log.exception("stream_failed", door=self.door)
            yield self.stream_error(plan, internal_error(exc))
        finally:
            # Closing this generator early (client gone) must stop the engine now, not
            # whenever the merged stream is garbage-collected.
            await gens.aclose()
        for event in self.stream_trailer:
            yield event


def json_response(body: Any) -> Response:
    """`body` as JSON with orjson (Starlette's JSONResponse runs the stdlib encoder).
    The same JSON values; a float that is not finite (no JSON form) becomes null rather
    than failing the response."""
    return Response(orjson.dumps(body), media_type="application/json")


async def cancel_on_disconnect(request: Request, work: Awaitable[T]) -> T:
    """`work`, awaited in this task and cancelled if the client disconnects first
    (`sse.unless_disconnected`'s rule with one watcher task, not two tasks and an
    `asyncio.wait`): a dropped request must not keep the engine busy."""
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await request.receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    watcher = asyncio.create_task(watch())
    try:
        result = await work
    except asyncio.CancelledError:
        if gone:  # our own cancel, not the server's: the caller sees a disconnect
            task.uncancel()
            raise ClientDisconnected() from None
        raise
    finally:
        watcher.cancel()
    if gone:  # it left as the work finished: the cancel asked for is taken back
        task.uncancel()
        raise ClientDisconnected()
    return result


def swarmrl_info(episode_id: str, results: list[GenerationResult]) -> SwarmrlInfo:
    """The `swarmrl` extension of a response: its calls, versions and overrides."""
    chat = chat_of(results[0].call) or {}
    return SwarmrlInfo(
        episode_id=episode_id, call_ids=[r.call.call_id for r in results],
        policy_version=results[0].call.policy_version, overridden=results[0].overridden,
        version_spans=[r.call.spans() for r in results],
        fork_reason=str(chat.get("fork_reason") or ""),
    )


def results_of(states: list[ChoiceState]) -> list[GenerationResult]:
    """The finished choices' results in choice order (all of them must be finished)."""
    out = [s.result for s in states]
    assert all(r is not None for r in out), "a choice ended without a result"
    return out  # type: ignore[return-value]
