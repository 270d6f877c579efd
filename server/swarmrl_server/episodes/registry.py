"""Episodes: start, generate, reward, end, abort — the domain behind EpisodeService.

Open episodes live in memory (with their calls, which the next chat turn
extends) and in the store; every state change is committed to the store before
the call returns. Retried requests carry a client-made request_id and are
applied once: a repeated StartEpisode returns the same episode, a repeated
EndEpisode the stored answer, a repeated Generate the recorded call.

Every episode belongs to its session's owner (`EpisodeRecord.owner`). Each entry
point takes the caller's `Principal`; a caller that may not act on the episode gets
the same NOT_FOUND as for an id that never existed, and request ids are looked up
within the caller's own episodes only. In-process callers (the HTTP shim, whose
per-episode key already named the episode) pass `IN_PROCESS`.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from swarmrl_server.engine.base import GenerationChunk, GenerationOutput
from swarmrl_server.episodes.calls import GenerationResult, call_record, recorded_call, replay
from swarmrl_server.episodes.chat import Message, parse_reply
from swarmrl_server.episodes.resolve import (
    GenerationPolicy,
    ResolvedRequest,
    SamplingRequest,
    resolve,
)
from swarmrl_server.errors import (
    Code,
    Reason,
    SwarmError,
    invalid,
    not_found,
    precondition,
    unavailable,
)
from swarmrl_server.hosting import ModelHost
from swarmrl_server.limits import check_labels, check_reason
from swarmrl_server.logs import bind_ids
from swarmrl_server.security import IN_PROCESS, EpisodeKeys, Principal, require_owner
from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from swarmrl_server.observe.telemetry import Telemetry

log = structlog.get_logger("swarmrl.episodes")

_DEFAULT_SAMPLING = SamplingRequest()

MAX_ID_LEN = 256


async def _never_paused(model: str, timeout_s: float) -> str | None:
    return None


@dataclass
class _Open:
    record: EpisodeRecord
    calls: list[CallRecord]
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class EpisodeRegistry:
    """Owns every episode's lifecycle."""

    def __init__(
        self,
        store: SqliteStore,
        models: dict[str, ModelHost],
        keys: EpisodeKeys,
        *,
        policy: GenerationPolicy | None = None,
        wait_generating: Callable[[str, float], Awaitable[str | None]] = _never_paused,
        require_session: Callable[[str, Principal], object] = lambda s, c: None,
        on_ended: Callable[[EpisodeRecord], Awaitable[None]] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._store = store
        self._models = models
        self.keys = keys
        self.policy = policy or GenerationPolicy()
        self._wait_generating = wait_generating
        """(model, seconds) -> None once the model generates, or why it is still paused
        when the seconds are up (`Pauses.wait_generating`)."""
        self._require_session = require_session
        self._on_ended = on_ended
        """Told of each ended episode in the step it leaves the open set: it must hand it
        on before its first await (a trainer's seal of groups counts on it)."""
        self._telemetry = telemetry
        self._open: dict[str, _Open] = {}
        self._inflight: dict[str, int] = {}

    async def load(self) -> None:
        """Restores open episodes after a restart, calls included."""
        for record in await self._store.list_episodes(EpisodeState.OPEN, with_calls=True):
            self._open[record.episode_id] = _Open(record, record.calls)
            record.calls = []

    @property
    def open_count(self) -> int:
        return len(self._open)

    def inflight(self, model: str) -> int:
        """Generations of `model` running or queued now."""
        return self._inflight.get(model, 0)

    def open_episodes(self) -> list[tuple[EpisodeRecord, int, float]]:
        """Open episodes with their call count and the time of their last activity."""
        return [(o.record, len(o.calls),
                 max([o.record.start_time] + [c.created_at for c in o.calls]))
                for o in self._open.values()]

    def open_in_session(self, session_id: str) -> list[str]:
        return [e for e, o in self._open.items() if o.record.session_id == session_id]

    # -- start ---------------------------------------------------------------------

    async def start(
        self,
        *,
        session_id: str,
        task_id: str,
        group_id: str,
        agent_version: str,
        models: list[str],
        request_id: str,
        labels: dict[str, str],
        caller: Principal,
    ) -> tuple[EpisodeRecord, str]:
        """Starts an episode in `caller`'s session; returns it and its API key (for the
        OpenAI shim)."""
        session = self._require_session(session_id, caller)
        owner = getattr(session, "owner", caller.name)
        if request_id:
            if len(request_id) > MAX_ID_LEN:
                raise invalid("request_id", f"must be at most {MAX_ID_LEN} characters")
            existing = await self._store.find_episode_by_start_request(request_id, owner)
            if existing is not None:
                return existing, self.keys.key_for(existing.episode_id)
        for name, value in (("task_id", task_id), ("group_id", group_id),
                            ("agent_version", agent_version)):
            if len(value) > MAX_ID_LEN:
                raise invalid(name, f"must be at most {MAX_ID_LEN} characters")
        check_labels(labels)
        if not models:
            models = [next(iter(self._models))]
        for name in models:
            if name not in self._models:
                raise not_found(Reason.MODEL_NOT_FOUND, "model", name)
        if len(set(models)) != len(models):
            raise invalid("models", "lists a model twice")
        episode_id = f"ep-{uuid.uuid4().hex}"
        record = EpisodeRecord(
            episode_id=episode_id, session_id=session_id, task_id=task_id,
            group_id=group_id or task_id, agent_version=agent_version, models=list(models),
            labels=dict(labels), state=EpisodeState.OPEN, start_time=time.time(),
            start_request_id=request_id, owner=owner,
        )
        await self._store.create_episode(record)
        self._open[episode_id] = _Open(record, [])
        bind_ids(episode_id=episode_id)
        log.debug("episode_started", episode_id=episode_id, task_id=task_id)
        return record, self.keys.key_for(episode_id)

    # -- lookups -------------------------------------------------------------------

    async def get(
        self, episode_id: str, *, with_calls: bool = False, caller: Principal
    ) -> EpisodeRecord:
        record = await self._store.get_episode(episode_id, with_calls=with_calls)
        if record is None:
            raise not_found(Reason.EPISODE_NOT_FOUND, "episode", episode_id)
        require_owner(caller, record.owner, Reason.EPISODE_NOT_FOUND, "episode", episode_id)
        return record

    def open_record(self, episode_id: str) -> EpisodeRecord | None:
        """The episode's record from memory when it is open (no store read: the HTTP
        door resolves every request's key with it); None otherwise. Read-only."""
        open_ = self._open.get(episode_id)
        return None if open_ is None else open_.record

    def open_calls(self, episode_id: str) -> Sequence[CallRecord]:
        """An open episode's recorded calls, oldest first, from memory (no store read: the
        HTTP door finds stored responses in them); empty when the episode is not open.
        Read-only."""
        open_ = self._open.get(episode_id)
        return () if open_ is None else open_.calls

    async def by_api_key(self, api_key: str) -> EpisodeRecord | None:
        episode_id = self.keys.episode_for(api_key)
        return None if episode_id is None else await self._store.get_episode(episode_id)

    async def _require_open(self, episode_id: str, *, caller: Principal) -> _Open:
        open_ = self._open.get(episode_id)
        if open_ is not None:
            require_owner(
                caller, open_.record.owner, Reason.EPISODE_NOT_FOUND, "episode", episode_id
            )
            return open_
        # NOT_FOUND when it never existed or is not the caller's.
        record = await self.get(episode_id, caller=caller)
        raise precondition(
            Reason.EPISODE_NOT_OPEN, f"episode {episode_id} is {record.state.value}, not open"
        )

    # -- generate ------------------------------------------------------------------

    async def generate(
        self,
        episode_id: str,
        *,
        model: str = "",
        messages: list[Message] | None = None,
        tools: list[Message] | None = None,
        token_ids: list[int] | None = None,
        sampling: SamplingRequest = _DEFAULT_SAMPLING,
        request_id: str = "",
        input_field: str = "input",
        on_prompt: Callable[[list[int]], None] | None = None,
        annotations: dict[str, Any] | None = None,
        caller: Principal,
    ) -> AsyncIterator[GenerationChunk | GenerationResult]:
        """Runs one call: validates, renders, streams the engine's chunks, records the call,
        and yields the GenerationResult last. `on_prompt` is told the exact prompt ids
        before the engine starts (a stream's header reports their count up front).
        `annotations` (chat input only) are kept with the call's chat record, under
        "annotations": what the door that made the call needs to show it again (e.g. the
        Responses API's stored-response fields); rendering never reads them."""
        bind_ids(episode_id=episode_id)
        open_ = await self._require_open(episode_id, caller=caller)
        if replayed := recorded_call(open_.calls, request_id):  # a retry of a finished call
            if on_prompt is not None:
                on_prompt(replayed.prompt_ids)
            yield replay(replayed)
            return
        host = self.model_of(open_.record, model)
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
        open_ = await self._require_open(episode_id, caller=caller)  # ended while waiting?
        calls_of_model = [c for c in open_.calls if c.model == host.name]
        request = resolve(
            host, self.policy, sampling, messages=messages, tools=tools, token_ids=token_ids,
            earlier_calls=calls_of_model, input_field=input_field, affinity_key=episode_id,
            annotations=annotations,
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
        call = call_record(
            call_id, episode_id, host.name, request, output, message, finish_reason,
            request_id, calls_of_model,
        )
        # Once the engine has finished, the call is recorded whole even if the caller goes
        # away meanwhile, so the store and the in-memory call list never disagree.
        recorded = await asyncio.shield(self._record_call(open_, call))
        if recorded is not call:  # a re-issue of this request_id finished first
            yield replay(recorded)
            return
        if self._telemetry is not None:
            self._telemetry.call_done(
                host.name, prompt_tokens=len(call.prompt_ids),
                completion_tokens=len(call.completion_ids), finish_reason=finish_reason,
                first_token_s=timing.get("first_token_s"), total_s=time.perf_counter() - t0)
        yield GenerationResult(call, message, finish_reason, request.overridden)

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

    async def _record_call(self, open_: _Open, call: CallRecord) -> CallRecord:
        """Records `call`, or returns the call already recorded under its request_id (a
        client re-issued a call whose stream broke while this one still ran): one
        request_id, one recorded call."""
        async with open_.lock:
            if call.episode_id not in self._open:
                # Ended or aborted while this call ran: hand the result back, record nothing.
                log.warning("call_after_episode_closed", episode_id=call.episode_id)
                return call
            if call.request_id:
                for earlier in open_.calls:
                    if earlier.request_id == call.request_id:
                        return earlier
            call.seq = len(open_.calls)
            await self._store.add_call(call)
            for older in open_.calls:  # the caches serve the next turn only (memory)
                if older.model == call.model:
                    older.chat, older.rendered_text = None, ""
            open_.calls.append(call)
            return call

    def model_of(self, record: EpisodeRecord, model: str) -> ModelHost:
        """The model a call of `record` names ("" is the episode's first): the one rule,
        for every door. A name the server does not host, or one the episode was not
        started with, is NOT_FOUND (MODEL_NOT_FOUND, naming "model"), as OpenAI answers
        for a model the key cannot use: a wrong name never falls back to another model."""
        name = model or record.models[0]
        if name not in self._models or name not in record.models:
            raise SwarmError(
                Code.NOT_FOUND, Reason.MODEL_NOT_FOUND,
                f"model: {name!r} is not one of this episode's models {list(record.models)}",
                field="model", metadata={"model": name},
            )
        return self._models[name]

    # -- rewards and endings -------------------------------------------------------

    async def submit_reward(
        self, episode_id: str, value: float, call_id: str = "", *, caller: Principal
    ) -> float | None:
        open_ = await self._require_open(episode_id, caller=caller)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise invalid("value", f"reward must be a finite number; got {value!r}")
        async with open_.lock:
            await self._require_open(episode_id, caller=caller)
            if call_id:
                call = next((c for c in open_.calls if c.call_id == call_id), None)
                if call is None:
                    raise not_found(Reason.CALL_NOT_FOUND, "call", call_id)
                await self._store.set_call_reward(call_id, float(value))
                call.reward = float(value)
            else:
                await self._store.set_episode_reward(episode_id, float(value))
                open_.record.reward = float(value)
            return open_.record.reward

    async def submit_model_reward(
        self, episode_id: str, model: str, value: float, *, caller: Principal
    ) -> dict[str, float]:
        """Records `model`'s own reward (its trainer uses it instead of the episode's);
        returns the episode's per-model rewards."""
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise invalid("value", f"reward must be a finite number; got {value!r}")
        open_ = await self._require_open(episode_id, caller=caller)
        self._check_reward_models(open_.record, {model: value}, "model")
        async with open_.lock:
            await self._require_open(episode_id, caller=caller)
            await self._store.set_model_reward(episode_id, model, float(value))
            open_.record.model_rewards[model] = float(value)
            return dict(open_.record.model_rewards)

    @staticmethod
    def _check_reward_models(record: EpisodeRecord, rewards: dict[str, float], field: str) -> None:
        for model, value in rewards.items():
            name = field if field == "model" else f"{field}[{model!r}]"
            if model not in record.models:
                raise invalid(name, f"{model!r} is not among the episode's models {record.models}")
            if not isinstance(value, (int, float)) or not math.isfinite(value):
                raise invalid(name, f"reward must be a finite number; got {value!r}")

    async def end(
        self, episode_id: str, reward: float | None, request_id: str,
        *, caller: Principal, model_rewards: dict[str, float] | None = None,
    ) -> EpisodeRecord:
        """Ends an episode and queues it, in one transaction, for every model it lists
        (each with its own reward if it has one, else the episode's)."""
        if reward is not None and not math.isfinite(reward):
            raise invalid("reward", f"reward must be a finite number; got {reward!r}")
        replay = await self._replayed_finish(episode_id, request_id, EpisodeState.ENDED, caller)
        if replay is not None:
            return replay
        open_ = await self._require_open(episode_id, caller=caller)
        self._check_reward_models(open_.record, model_rewards or {}, "model_rewards")
        async with open_.lock:
            await self._require_open(episode_id, caller=caller)
            final = open_.record.reward if reward is None else float(reward)
            if final is None:
                raise precondition(
                    Reason.REWARD_MISSING,
                    f"episode {episode_id} has no reward: submit one or pass it to EndEpisode",
                )
            await self._store.finish_episode(
                episode_id, EpisodeState.ENDED, reward=final, request_id=request_id,
                model_rewards={m: float(v) for m, v in (model_rewards or {}).items()},
            )
            record = await self.get(episode_id, caller=caller)
            # Out of the open set and to the trainers in one step: a trainer never sees it
            # neither open nor ended (trainer.batching seals a group while one is open).
            del self._open[episode_id]
            if self._on_ended is not None:
                await self._on_ended(record)
        if self._telemetry is not None:
            self._telemetry.episode_finished(EpisodeState.ENDED.value)
        return record

    async def abort(
        self, episode_id: str, reason: str, request_id: str = "", *, caller: Principal
    ) -> EpisodeRecord:
        check_reason(reason)
        replay = await self._replayed_finish(episode_id, request_id, EpisodeState.ABORTED, caller)
        if replay is not None:
            return replay
        open_ = self._open.get(episode_id)
        if open_ is not None:
            require_owner(
                caller, open_.record.owner, Reason.EPISODE_NOT_FOUND, "episode", episode_id
            )
        if open_ is None:
            record = await self.get(episode_id, caller=caller)
            if record.state is EpisodeState.ABORTED:
                return record  # aborting twice is harmless
            raise precondition(Reason.EPISODE_NOT_OPEN, f"episode {episode_id} already ended")
        async with open_.lock:
            if episode_id not in self._open:
                return await self.abort(episode_id, reason, request_id, caller=caller)
            await self._store.finish_episode(
                episode_id, EpisodeState.ABORTED, reward=open_.record.reward,
                request_id=request_id, abort_reason=reason or "aborted by client",
            )
            del self._open[episode_id]
        if self._telemetry is not None:
            self._telemetry.episode_finished(EpisodeState.ABORTED.value)
        return await self.get(episode_id, caller=caller)

    async def _replayed_finish(
        self, episode_id: str, request_id: str, state: EpisodeState, caller: Principal
    ) -> EpisodeRecord | None:
        """The stored answer when `request_id` is the call that already finished the episode."""
        if not request_id or episode_id in self._open:
            return None
        record = await self._store.get_episode(episode_id)
        if record is not None and not caller.may_act_on(record.owner):
            return None  # the caller gets NOT_FOUND further on
        if record is not None and record.state is state and record.end_request_id == request_id:
            return record
        return None

    async def abort_session(self, session_id: str, reason: str) -> int:
        ids = self.open_in_session(session_id)
        for episode_id in ids:
            try:
                await self.abort(episode_id, reason, caller=IN_PROCESS)
            except SwarmError:  # ended meanwhile
                pass
        return len(ids)
