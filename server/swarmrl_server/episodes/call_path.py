"""One generation call, typed from the door to the engine, and the path it takes.

Every door (gRPC's Generate; the HTTP chat completions, completions, messages and
responses) turns its request into `GenerateCall`s, one per choice, and hands each to
`CallPath.generate`, which runs the steps of a call in this order and nowhere else:

1. the episode is open and the caller's (NOT_FOUND otherwise), and a retried
   `request_id` gets its recorded call back, never a second generation;
2. the call waits out a pause of its model (up to the policy's bound), then checks the
   episode again (it may have ended meanwhile);
3. `resolve`: the sampling and prompt rules, rendering a chat against the episode's
   earlier calls of the model;
4. capacity: at most `max_inflight` generations of a model run or queue at once;
5. the engine's stream, chunks passed on as they come;
6. the reply parsed (tool calls) and the call recorded, shielded from a caller that
   goes away once the engine has finished, so the store and memory never disagree.

The episodes' lifecycle (start, rewards, ends) is `EpisodeRegistry`'s; this module sees
the open set only through `OpenEpisodes`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

from swarmrl_server.engine.base import GenerationChunk, GenerationOutput
from swarmrl_server.episodes.calls import GenerationResult, call_record, recorded_call, replay
from swarmrl_server.episodes.chat import Annotations, Message, Tool, parse_reply
from swarmrl_server.episodes.resolve import (
    GenerationPolicy,
    ResolvedRequest,
    SamplingRequest,
    resolve,
)
from swarmrl_server.errors import Reason, unavailable
from swarmrl_server.hosting import ModelHost
from swarmrl_server.logs import bind_ids
from swarmrl_server.security import Principal
from swarmrl_server.store.records import CallRecord, EpisodeRecord
from swarmrl_server.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from swarmrl_server.observe.telemetry import Telemetry

log = structlog.get_logger("swarmrl.episodes")

_DEFAULT_SAMPLING = SamplingRequest()


@dataclass(frozen=True, slots=True)
class GenerateCall:
    """One generation an episode asks for: what every door builds, per choice."""

    episode_id: str
    caller: Principal
    """Who asks (`security.IN_PROCESS` for the HTTP doors, whose key named the episode)."""
    model: str = ""
    """The model's name; "" is the episode's first."""
    messages: list[Message] | None = None
    """A chat prompt (rendered with the model's template); or `token_ids`."""
    tools: list[Tool] | None = None
    token_ids: list[int] | None = None
    """A token prompt, recorded exactly as sent."""
    sampling: SamplingRequest = _DEFAULT_SAMPLING
    request_id: str = ""
    """Client-made: a retry with the same id gets the recorded call back."""
    input_field: str = "input"
    """The request field the prompt came from, for error messages."""
    annotations: Annotations | None = None
    """Kept with a chat call's record under "annotations": what the door that made the
    call needs to show it again (the Responses API's stored-response fields); rendering
    never reads them."""


@dataclass
class OpenEpisode:
    """An open episode in memory: its record and calls (which the next chat turn extends)."""

    record: EpisodeRecord
    calls: list[CallRecord]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class OpenEpisodes(Protocol):
    """What the call path reads of the episodes (`EpisodeRegistry`)."""

    async def require_open(self, episode_id: str, *, caller: Principal) -> OpenEpisode: ...

    def is_open(self, episode_id: str) -> bool: ...

    def model_of(self, record: EpisodeRecord, model: str) -> ModelHost: ...


async def never_paused(model: str, timeout_s: float) -> str | None:
    return None


class CallPath:
    """Runs generation calls (see the module doc); counts each model's calls in flight."""

    def __init__(
        self,
        episodes: OpenEpisodes,
        store: SqliteStore,
        policy: GenerationPolicy,
        *,
        wait_generating: Callable[[str, float], Awaitable[str | None]] = never_paused,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._episodes = episodes
        self._store = store
        self.policy = policy
        self._wait_generating = wait_generating
        """(model, seconds) -> None once the model generates, or why it is still paused
        when the seconds are up (`Pauses.wait_generating`)."""
        self._telemetry = telemetry
        self._inflight: dict[str, int] = {}

    def inflight(self, model: str) -> int:
        """Generations of `model` running or queued now."""
        return self._inflight.get(model, 0)

    async def generate(
        self, call: GenerateCall, *, on_prompt: Callable[[list[int]], None] | None = None
    ) -> AsyncIterator[GenerationChunk | GenerationResult]:
        """Runs `call`: streams the engine's chunks, records the call, and yields the
        GenerationResult last. `on_prompt` is told the exact prompt ids before the engine
        starts (a stream's header reports their count up front)."""
        episode_id, caller = call.episode_id, call.caller
        bind_ids(episode_id=episode_id)
        open_ = await self._episodes.require_open(episode_id, caller=caller)
        if replayed := recorded_call(open_.calls, call.request_id):  # a retry of a finished call
            if on_prompt is not None:
                on_prompt(replayed.prompt_ids)
            yield replay(replayed)
            return
        host = self._episodes.model_of(open_.record, call.model)
        # Only this model's pauses hold this call, and it waits them out (up to the
        # policy's bound) rather than failing: harnesses that proxy calls drop the
        # Retry-After of a 429, so a weight sync of seconds would kill their rollouts.
        # Every door waits, gRPC's Generate too: one rule, and an SDK call then resumes
        # the moment the pause lifts instead of after a retry's backoff (its retries
        # still cover a pause longer than the bound). The call holds no engine capacity
        # while it waits (it counts in flight only once the engine runs it), and a
        # caller that goes away cancels the wait.
        paused = await self._wait_generating(host.name, self.policy.pause_wait_s)
        if paused:
            raise unavailable(Reason.GENERATION_PAUSED, f"generation is paused: {paused}")
        open_ = await self._episodes.require_open(episode_id, caller=caller)  # ended meanwhile?
        calls_of_model = [c for c in open_.calls if c.model == host.name]
        request = resolve(
            host, self.policy, call.sampling, messages=call.messages, tools=call.tools,
            token_ids=call.token_ids, earlier_calls=calls_of_model,
            input_field=call.input_field, affinity_key=episode_id,
            annotations=call.annotations,
        )
        self._check_capacity(host.name)
        if on_prompt is not None:
            on_prompt(request.prompt_ids)

        call_id = f"call-{uuid.uuid4().hex}"
        bind_ids(call_id=call_id)
        t0 = time.perf_counter()
        timing: dict[str, float] = {}
        output: GenerationOutput | None = None
        async for item in self._run_engine(host, request, timing, t0):
            if isinstance(item, GenerationOutput):
                output = item
            else:
                yield item
        assert output is not None, "engine ended without a result"

        message, finish_reason = parse_reply(output.text, output.finish_reason)
        record = call_record(
            call_id, episode_id, host.name, request, output, message, finish_reason,
            call.request_id, calls_of_model,
        )
        # Once the engine has finished, the call is recorded whole even if the caller goes
        # away meanwhile, so the store and the in-memory call list never disagree.
        recorded = await asyncio.shield(self._record(open_, record))
        if recorded is not record:  # a re-issue of this request_id finished first
            yield replay(recorded)
            return
        if self._telemetry is not None:
            self._telemetry.call_done(
                host.name, prompt_tokens=len(record.prompt_ids),
                completion_tokens=len(record.completion_ids), finish_reason=finish_reason,
                first_token_s=timing.get("first_token_s"), total_s=time.perf_counter() - t0)
        yield GenerationResult(record, message, finish_reason, request.overridden)

    def _check_capacity(self, model: str) -> None:
        if self._inflight.get(model, 0) >= self.policy.max_inflight:
            raise unavailable(
                Reason.OVER_CAPACITY,
                f"model {model!r} already runs {self.policy.max_inflight} generations",
            )

    async def _run_engine(
        self, host: ModelHost, request: ResolvedRequest, timing: dict[str, float], t0: float
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        """The engine's stream, counted in flight for `host`; the time to the first chunk
        goes to `timing["first_token_s"]`. A call the engine aborted (the server is
        stopping) ends in UNAVAILABLE, retryable."""
        self._inflight[host.name] = self._inflight.get(host.name, 0) + 1
        try:
            async for item in host.engine.generate(request.prompt_ids, request.params):
                if not isinstance(item, GenerationOutput) and "first_token_s" not in timing:
                    timing["first_token_s"] = time.perf_counter() - t0
                if isinstance(item, GenerationOutput) and item.finish_reason == "abort":
                    raise unavailable(Reason.SHUTTING_DOWN,
                                      "generation was aborted (the server is stopping)")
                yield item
        finally:
            self._inflight[host.name] -= 1

    async def _record(self, open_: OpenEpisode, call: CallRecord) -> CallRecord:
        """Records `call`, or returns the call already recorded under its request_id (a
        client re-issued a call whose stream broke while this one still ran): one
        request_id, one recorded call."""
        async with open_.lock:
            if not self._episodes.is_open(call.episode_id):
                # Ended or aborted while this call ran: hand the result back, record nothing.
                log.warning("call_after_episode_closed", episode_id=call.episode_id)
                return call
            if earlier := recorded_call(open_.calls, call.request_id):
                return earlier
            call.seq = len(open_.calls)
            await self._store.add_call(call)
            for older in open_.calls:  # the caches serve the next turn only (memory)
                if older.model == call.model:
                    older.chat, older.rendered_text = None, ""
            open_.calls.append(call)
            return call
