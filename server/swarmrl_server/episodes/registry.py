"""Episodes: start, generate, reward, end, abort — the domain behind EpisodeService.

A call's own path (pause wait, resolve, capacity, engine, parse, record) is
`episodes.call_path`'s; `generate` hands it the door's typed `GenerateCall`.

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

import math
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import structlog

from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.call_path import CallPath, GenerateCall, OpenEpisode, never_paused
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.resolve import GenerationPolicy
from swarmrl_server.errors import Code, Reason, SwarmError, invalid, not_found, precondition
from swarmrl_server.hosting import ModelHost
from swarmrl_server.limits import check_labels, check_reason
from swarmrl_server.logs import bind_ids
from swarmrl_server.security import IN_PROCESS, EpisodeKeys, Principal, require_owner
from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore

if TYPE_CHECKING:
    from swarmrl_server.observe.telemetry import Telemetry

log = structlog.get_logger("swarmrl.episodes")

MAX_ID_LEN = 256


class EpisodeRegistry:
    """Owns every episode's lifecycle; its calls run on `calls` (`episodes.call_path`)."""

    def __init__(
        self,
        store: SqliteStore,
        models: dict[str, ModelHost],
        keys: EpisodeKeys,
        *,
        policy: GenerationPolicy | None = None,
        wait_generating: Callable[[str, float], Awaitable[str | None]] = never_paused,
        require_session: Callable[[str, Principal], object] = lambda s, c: None,
        on_ended: Callable[[EpisodeRecord], Awaitable[None]] | None = None,
        telemetry: Telemetry | None = None,
    ) -> None:
        self._store = store
        self._models = models
        self.keys = keys
        self.policy = policy or GenerationPolicy()
        self._require_session = require_session
        self._on_ended = on_ended
        """Told of each ended episode in the step it leaves the open set: it must hand it
        on before its first await (a trainer's seal of groups counts on it)."""
        self._telemetry = telemetry
        self._open: dict[str, OpenEpisode] = {}
        self.calls = CallPath(self, store, self.policy, wait_generating=wait_generating,
                              telemetry=telemetry)

    async def load(self) -> None:
        """Restores open episodes after a restart, calls included."""
        for record in await self._store.list_episodes(EpisodeState.OPEN, with_calls=True):
            self._open[record.episode_id] = OpenEpisode(record, record.calls)
            record.calls = []

    @property
    def open_count(self) -> int:
        return len(self._open)

    def inflight(self, model: str) -> int:
        """Generations of `model` running or queued now."""
        return self.calls.inflight(model)

    def is_open(self, episode_id: str) -> bool:
        return episode_id in self._open

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
        self._open[episode_id] = OpenEpisode(record, [])
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

    async def require_open(self, episode_id: str, *, caller: Principal) -> OpenEpisode:
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

    def generate(
        self, call: GenerateCall, *, on_prompt: Callable[[list[int]], None] | None = None
    ) -> AsyncIterator[GenerationChunk | GenerationResult]:
        """Runs one call (`CallPath.generate`): chunks as they come, the result last."""
        return self.calls.generate(call, on_prompt=on_prompt)

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
        open_ = await self.require_open(episode_id, caller=caller)
        if not isinstance(value, (int, float)) or not math.isfinite(value):
            raise invalid("value", f"reward must be a finite number; got {value!r}")
        async with open_.lock:
            await self.require_open(episode_id, caller=caller)
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
        open_ = await self.require_open(episode_id, caller=caller)
        self._check_reward_models(open_.record, {model: value}, "model")
        async with open_.lock:
            await self.require_open(episode_id, caller=caller)
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
        open_ = await self.require_open(episode_id, caller=caller)
        self._check_reward_models(open_.record, model_rewards or {}, "model_rewards")
        async with open_.lock:
            await self.require_open(episode_id, caller=caller)
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
