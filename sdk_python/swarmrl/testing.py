"""An in-process fake swarm server, for testing agents without a model, torch or a GPU.

.. code-block:: python

    from swarmrl.testing import FakeSwarmServer

    async def test_my_agent() -> None:
        async with FakeSwarmServer(reply="The answer is 4.") as server:
            async with swarmrl.AsyncSwarmClient(server.target) as client:
                assert await run_my_agent(client) == 1.0

A sync client blocks its thread, so sync tests serve from a thread of their own::

    with FakeSwarmServer().run_in_thread() as server, swarmrl.SwarmClient(server.target) as c:
        ...

The server implements the four services on `grpc.aio` with in-memory state and
the error semantics of the protos: NOT_FOUND for unknown episodes, models,
sessions and calls; FAILED_PRECONDITION for episodes that are not open (a
repeated request_id gets the first answer instead) and REWARD_MISSING;
INVALID_ARGUMENT naming the field; UNAVAILABLE with a retry delay while paused.

Its "model" is a toy: token ids are UTF-8 bytes (plus an end token, 256), a chat
is rendered as ``<|role|>content\\n`` per message then ``<|assistant|>``, and the
reply is fixed (or computed from the prompt text by a callable), streamed one
token per chunk. Given tools, it calls the first one unless the last message is a
tool result. It honours max_tokens, stop, stop_token_ids and top_logprobs and
ignores the randomness settings (it is deterministic). Leases never expire, and
the per-episode OpenAI URL is not served.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import threading
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence

import grpc
import grpc.aio
from google.protobuf.message import Message

from swarmrl import _fake_model as toy
from swarmrl._compat import Self
from swarmrl._fake_admin import FakeAdmin, FakeHold
from swarmrl._fake_rpc import (
    _C,
    _Abort,
    _Answers,
    _Ctx,
    _EventLog,
    _Fault,
    _invalid,
    _rewards_on,
    _streaming,
    _unary,
)
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import episode_service_pb2 as epb
from swarmrl_proto.v1 import episode_service_pb2_grpc as episode_grpc
from swarmrl_proto.v1 import session_service_pb2 as spb
from swarmrl_proto.v1 import session_service_pb2_grpc as session_grpc
from swarmrl_proto.v1 import types_pb2

__all__ = ["EOS_TOKEN_ID", "FakeSwarmServer"]

EOS_TOKEN_ID = toy.EOS_TOKEN_ID
"""The fake model's end-of-turn token; ids below it are UTF-8 bytes."""

_OPEN = types_pb2.EPISODE_STATE_OPEN


class FakeSwarmServer(
    session_grpc.SessionServiceServicer,
    episode_grpc.EpisodeServiceServicer,
    FakeAdmin,
):
    """A swarm server on ``127.0.0.1`` with a deterministic toy model; see the module doc.

    Args:
        port: Port to bind; 0 picks a free one (bind a used port again to fake a restart).
        reply: The fixed reply, or a function from the rendered prompt text to a reply.
        models: Names of the hosted models; the first is the default.
        api_key: When set, every call must carry ``authorization: Bearer <api_key>``.

    Attributes:
        calls: How many times each method (e.g. ``"Generate"``) was called.
        request_ids: The request_ids each method received, in order.
        metadata: The invocation metadata of each method's latest call.
    """

    def __init__(
        self,
        *,
        port: int = 0,
        reply: str | Callable[[str], str] = "Hello from the fake swarm.",
        models: Sequence[str] = ("fake-model",),
        api_key: str | None = None,
    ) -> None:
        self.port = port
        self.instance = uuid.uuid4().hex
        self.calls: collections.Counter[str] = collections.Counter()
        self.request_ids: dict[str, list[str]] = collections.defaultdict(list)
        self.metadata: dict[str, dict[str, str]] = {}
        self.declared_done: set[str] = set()
        """Sessions that called DeclareDone."""
        self._reply, self._api_key = reply, api_key
        self._versions = {name: 0 for name in models}
        self._sessions: dict[str, str] = {}
        self._episodes: dict[str, toy.Episode] = {}
        self._answers = _Answers()
        self._faults: dict[str, list[_Fault]] = collections.defaultdict(list)
        self._events = _EventLog()
        self._pause: tuple[str, float] | None = None
        self._ended = self._aborted = 0
        self._holds: dict[tuple[str, str], FakeHold] = {}
        self._server: grpc.aio.Server | None = None

    # -- lifecycle ------------------------------------------------------------------

    @property
    def target(self) -> str:
        """``host:port`` to give a client."""
        return f"127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Binds the port and starts serving."""
        self._events.loop = asyncio.get_running_loop()
        self._server = grpc.aio.server()
        session_grpc.add_SessionServiceServicer_to_server(self, self._server)
        episode_grpc.add_EpisodeServiceServicer_to_server(self, self._server)
        admin_grpc.add_AdminServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port(f"127.0.0.1:{self.port}")
        await self._server.start()

    async def stop(self, grace: float | None = None) -> None:
        """Stops serving; calls still running are cancelled after `grace` seconds."""
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    @contextlib.contextmanager
    def run_in_thread(self) -> Iterator[Self]:
        """Serves from an event loop on a background thread for the length of a ``with``."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-swarm", daemon=True)
        thread.start()
        asyncio.run_coroutine_threadsafe(self.start(), loop).result()
        try:
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.stop(), loop).result()
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()

    # -- steering (safe to call from any thread) --------------------------------------

    def pause(self, reason: str = "weight sync", retry_delay: float = 0.1) -> None:
        """Pauses generation: Generate answers UNAVAILABLE with `retry_delay` as RetryInfo."""
        self._pause = (reason, retry_delay)
        self._publish(spb.WatchEventsResponse(pausing=spb.Pausing(reason=reason)))

    def resume(self) -> None:
        """Resumes generation after `pause`."""
        reason = self._pause[0] if self._pause else ""
        self._pause = None
        self._publish(spb.WatchEventsResponse(resumed=spb.Resumed(reason=reason)))

    def set_policy_version(self, model: str, version: int) -> None:
        """Pretends an optimizer step changed `model`'s weights."""
        self._versions[model] = version
        changed = spb.PolicyVersionChanged(model=model, policy_version=version)
        self._publish(spb.WatchEventsResponse(policy_version_changed=changed))

    def drop_sessions(self) -> None:
        """Forgets every session, as a server restarted with a fresh store would."""
        self._sessions.clear()

    def inject_failure(
        self,
        method: str,
        *,
        code: grpc.StatusCode = grpc.StatusCode.UNAVAILABLE,
        times: int = 1,
        after_messages: int = 0,
        reason: str = "INJECTED",
        retry_delay: float | None = None,
    ) -> None:
        """Makes the next `times` calls of `method` (e.g. ``"Generate"``) fail with `code`.

        The failure comes after `after_messages` messages were sent; for a unary call,
        ``after_messages=1`` means the call took effect but its answer was lost.
        """
        self._faults[method].append(_Fault(code, times, after_messages, reason, retry_delay))

    def _publish(self, event: spb.WatchEventsResponse) -> None:
        self._events.publish(event)

    # -- shared plumbing ------------------------------------------------------------

    def _enter(self, method: str, request: Message, context: _Ctx) -> None:
        metadata = {k: str(v) for k, v in (context.invocation_metadata() or ())}
        self.calls[method] += 1
        self.metadata[method] = metadata
        if request_id := getattr(request, "request_id", ""):
            self.request_ids[method].append(request_id)
        if self._api_key and metadata.get("authorization") != f"Bearer {self._api_key}":
            raise _Abort(_C.UNAUTHENTICATED, "UNAUTHENTICATED", "missing or wrong API key")
        self._maybe_fail(method, sent=0)

    def _maybe_fail(self, method: str, sent: int) -> None:
        for f in self._faults[method]:
            if f.times > 0 and f.after_messages == sent:
                f.times -= 1
                raise _Abort(f.code, f.reason, "injected failure", retry_delay=f.retry_delay)

    def _episode(self, episode_id: str, *, must_be_open: bool = False) -> toy.Episode:
        ep = self._episodes.get(episode_id)
        if ep is None:
            raise _Abort(
                _C.NOT_FOUND,
                "EPISODE_NOT_FOUND",
                f"unknown episode {episode_id!r}",
                metadata={"episode_id": episode_id},
            )
        if must_be_open and ep.record.state != _OPEN:
            state = types_pb2.EpisodeState.Name(ep.record.state)
            raise _Abort(_C.FAILED_PRECONDITION, "EPISODE_NOT_OPEN", f"episode is {state}")
        return ep

    def _model(self, name: str) -> str:
        if name not in self._versions:
            raise _Abort(
                _C.NOT_FOUND, "MODEL_NOT_FOUND", f"unknown model {name!r}", metadata={"model": name}
            )
        return name

    # -- SessionService -------------------------------------------------------------

    @_unary
    async def OpenSession(self, req: spb.OpenSessionRequest, ctx: _Ctx) -> spb.OpenSessionResponse:
        if not req.session_id:
            raise _invalid("session_id", "must not be empty")
        self._sessions[req.session_id] = req.client_name
        lease = min(max(req.lease.ToTimedelta().total_seconds() or 30.0, 1.0), 300.0)
        response = spb.OpenSessionResponse(session_id=req.session_id, server_instance=self.instance)
        response.lease.FromSeconds(int(lease))
        return response

    @_unary
    async def Heartbeat(self, req: spb.HeartbeatRequest, ctx: _Ctx) -> spb.HeartbeatResponse:
        if req.session_id not in self._sessions:
            raise _Abort(_C.NOT_FOUND, "SESSION_NOT_FOUND", f"unknown session {req.session_id}")
        mine = [ep for ep in self._episodes.values() if ep.session_id == req.session_id]
        response = spb.HeartbeatResponse(open_episodes=sum(ep.record.state == _OPEN for ep in mine))
        response.lease.FromSeconds(30)
        return response

    @_unary
    async def DeclareDone(self, req: spb.DeclareDoneRequest, ctx: _Ctx) -> spb.DeclareDoneResponse:
        if req.session_id not in self._sessions:
            raise _Abort(_C.NOT_FOUND, "SESSION_NOT_FOUND", f"unknown session {req.session_id}")
        self.declared_done.add(req.session_id)
        return spb.DeclareDoneResponse()

    @_unary
    async def CloseSession(
        self, req: spb.CloseSessionRequest, ctx: _Ctx
    ) -> spb.CloseSessionResponse:
        self._sessions.pop(req.session_id, None)
        aborted = 0
        for ep in self._episodes.values():
            if ep.session_id == req.session_id and ep.record.state == _OPEN:
                self._abort(ep, "session closed")
                aborted += 1
        return spb.CloseSessionResponse(aborted_episodes=aborted)

    @_streaming
    async def WatchEvents(
        self, req: spb.WatchEventsRequest, ctx: _Ctx
    ) -> AsyncIterator[spb.WatchEventsResponse]:
        async for event in self._events.after(req.after_sequence):
            yield event

    # -- EpisodeService -------------------------------------------------------------

    @_unary
    async def StartEpisode(
        self, req: epb.StartEpisodeRequest, ctx: _Ctx
    ) -> epb.StartEpisodeResponse:
        rid = req.request_id
        if answer := self._answers.replay("StartEpisode", rid, epb.StartEpisodeResponse):
            return answer
        if req.session_id not in self._sessions:
            raise _Abort(
                _C.NOT_FOUND,
                "SESSION_NOT_FOUND",
                f"unknown session {req.session_id!r}",
                metadata={"session_id": req.session_id},
            )
        models = [self._model(name) for name in req.models] or [next(iter(self._versions))]
        episode_id = f"ep-{uuid.uuid4().hex[:12]}"
        record = epb.Episode(
            episode_id=episode_id,
            state=_OPEN,
            task_id=req.task_id,
            group_id=req.group_id or req.task_id,
            agent_version=req.agent_version,
            models=models,
            labels=dict(req.labels),
        )
        record.start_time.GetCurrentTime()
        self._episodes[episode_id] = toy.Episode(record, req.session_id)
        response = epb.StartEpisodeResponse(
            episode_id=episode_id,
            openai_base_url=f"http://fake.invalid/episodes/{episode_id}/v1",
            openai_api_key=f"sk-episode-{episode_id}",
            models=[m for m in toy.model_infos(self._versions) if m.name in models],
        )
        return self._answers.remember("StartEpisode", rid, response)

    @_streaming
    async def Generate(
        self, req: epb.GenerateRequest, ctx: _Ctx
    ) -> AsyncIterator[epb.GenerateResponse]:
        rid = req.request_id
        result = self._answers.replay("Generate", rid, epb.GenerateResult)
        if result is None:
            result = self._answers.remember("Generate", rid, self._generate(req))
        for chunk in () if req.result_only else toy.chunks(result):
            yield epb.GenerateResponse(chunk=chunk)
        yield epb.GenerateResponse(result=result)

    def _generate(self, request: epb.GenerateRequest) -> epb.GenerateResult:
        """Validates a Generate request, runs the toy model, and records the call."""
        ep = self._episode(request.episode_id, must_be_open=True)
        model = toy.model_of(ep.record.models, request.model, self._versions)
        toy.check_sampling(request.sampling)
        prompt, prompt_ids = toy.prompt_of(request)
        if self._pause is not None:
            reason, delay = self._pause
            raise _Abort(
                _C.UNAVAILABLE, "GENERATION_PAUSED", f"paused: {reason}", retry_delay=delay
            )
        reply = self._reply
        result = toy.complete(request, lambda: reply(prompt) if callable(reply) else reply)
        result.call_id = f"call-{uuid.uuid4().hex[:12]}"
        result.model, result.policy_version = model, self._versions[model]
        result.prompt_ids[:] = prompt_ids
        result.usage.prompt_tokens = len(prompt_ids)
        result.usage.completion_tokens = len(result.completion_ids)
        result.version_spans.add(policy_version=result.policy_version, start=0,
                                 end=len(result.completion_ids))
        ep.calls.append(
            epb.CallRecord(
                call_id=result.call_id,
                model=model,
                prompt_ids=prompt_ids,
                completion_ids=result.completion_ids,
                logprobs=result.logprobs,
                policy_version=result.policy_version,
                finish_reason=result.finish_reason,
                parent_call_id=toy.parent_of(ep.calls, prompt_ids),
                version_spans=result.version_spans,
            )
        )
        ep.record.num_calls = len(ep.calls)
        return result

    @_unary
    async def SubmitReward(
        self, req: epb.SubmitRewardRequest, ctx: _Ctx
    ) -> epb.SubmitRewardResponse:
        rid = req.request_id
        if answer := self._answers.replay("SubmitReward", rid, epb.SubmitRewardResponse):
            return answer
        if not math.isfinite(req.value):
            raise _invalid("value", "must be finite")
        ep = self._episode(req.episode_id, must_be_open=True)
        if req.call_id and req.model:
            raise _invalid("model", "give call_id or model, not both")
        if req.call_id:
            calls = [c for c in ep.calls if c.call_id == req.call_id]
            if not calls:
                raise _Abort(_C.NOT_FOUND, "CALL_NOT_FOUND", f"unknown call {req.call_id!r}")
            calls[0].reward = req.value
        elif req.model:
            _rewards_on(ep.record, {req.model: req.value}, "model")
        else:
            ep.record.reward = req.value
        response = epb.SubmitRewardResponse(model_rewards=ep.record.model_rewards)
        if ep.record.HasField("reward"):
            response.episode_reward = ep.record.reward
        return self._answers.remember("SubmitReward", rid, response)

    @_unary
    async def EndEpisode(self, req: epb.EndEpisodeRequest, ctx: _Ctx) -> epb.EndEpisodeResponse:
        rid = req.request_id
        if answer := self._answers.replay("EndEpisode", rid, epb.EndEpisodeResponse):
            return answer
        if req.HasField("reward") and not math.isfinite(req.reward):
            raise _invalid("reward", "must be finite")
        ep = self._episode(req.episode_id, must_be_open=True)
        if not ep.record.HasField("reward") and not req.HasField("reward"):
            raise _Abort(_C.FAILED_PRECONDITION, "REWARD_MISSING", "the episode has no reward")
        _rewards_on(ep.record, req.model_rewards, "model_rewards")
        if req.HasField("reward"):
            ep.record.reward = req.reward
        ep.record.state = types_pb2.EPISODE_STATE_ENDED
        ep.record.end_time.GetCurrentTime()
        self._ended += 1
        return self._answers.remember("EndEpisode", rid, epb.EndEpisodeResponse(episode=ep.record))

    @_unary
    async def AbortEpisode(
        self, req: epb.AbortEpisodeRequest, ctx: _Ctx
    ) -> epb.AbortEpisodeResponse:
        rid = req.request_id
        if answer := self._answers.replay("AbortEpisode", rid, epb.AbortEpisodeResponse):
            return answer
        ep = self._abort(self._episode(req.episode_id, must_be_open=True), req.reason)
        response = epb.AbortEpisodeResponse(episode=ep.record)
        return self._answers.remember("AbortEpisode", rid, response)

    def _abort(self, ep: toy.Episode, reason: str) -> toy.Episode:
        ep.record.state = types_pb2.EPISODE_STATE_ABORTED
        ep.record.abort_reason = reason
        ep.record.end_time.GetCurrentTime()
        self._aborted += 1
        return ep

    @_unary
    async def GetEpisode(self, req: epb.GetEpisodeRequest, ctx: _Ctx) -> epb.GetEpisodeResponse:
        ep = self._episode(req.episode_id)
        response = epb.GetEpisodeResponse(episode=ep.record)
        if req.include_calls:
            response.episode.calls.extend(ep.calls)
        return response
