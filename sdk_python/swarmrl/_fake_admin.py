"""The fake server's AdminService (`swarmrl.testing.FakeSwarmServer` mixes it in): status,
models, pause and resume, and the training RPCs a toy model answers trivially. Holds of
training are kept as the server keeps them, as leases (the server's trainer/holds.py): one
per holder, bound to a live session or to a lease of its own, listed by GetStatus until
released or lapsed; the toy model never trains, so it is held by construction anyway."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from swarmrl import _fake_model as toy
from swarmrl._fake_rpc import _C, _Abort, _Ctx, _EventLog, _invalid, _unary
from swarmrl_proto.v1 import admin_service_pb2 as apb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import types_pb2

_OPEN = types_pb2.EPISODE_STATE_OPEN


HOLD_LEASE_S = (1.0, 60.0, 600.0)
"""A hold's own lease, as the server bounds it: (least, default, most) seconds."""


@dataclass
class FakeHold:
    """A hold of a toy model's training."""

    reason: str
    since: float
    session_id: str
    expires_at: float
    """When its own lease runs out (0 when it lasts with its session)."""


class FakeAdmin(admin_grpc.AdminServiceServicer):
    """AdminService over the state `FakeSwarmServer` keeps (declared here, set there)."""

    instance: str
    _versions: dict[str, int]
    _sessions: dict[str, str]
    _episodes: Mapping[str, toy.Episode]
    _events: _EventLog
    _pause: tuple[str, float] | None
    _ended: int
    _aborted: int
    _holds: dict[tuple[str, str], FakeHold]
    """(model, holder) -> its hold."""

    if TYPE_CHECKING:  # FakeSwarmServer's own methods, which these handlers call

        def pause(self, reason: str = ..., retry_delay: float = ...) -> None: ...

        def resume(self) -> None: ...

        def _model(self, name: str) -> str: ...

        def _enter(self, method: str, request: Message, context: _Ctx) -> None: ...

        def _maybe_fail(self, method: str, sent: int) -> None: ...

    @_unary
    async def GetStatus(self, req: apb.GetStatusRequest, ctx: _Ctx) -> apb.GetStatusResponse:
        return apb.GetStatusResponse(
            server_instance=self.instance,
            sessions=len(self._sessions),
            open_episodes=sum(ep.record.state == _OPEN for ep in self._episodes.values()),
            ended_episodes=self._ended,
            aborted_episodes=self._aborted,
            paused=self._pause is not None,
            models=toy.model_infos(self._versions),
            last_event_sequence=self._events.last_sequence,
            holds=self._live_holds(),
        )

    def _live_holds(self) -> list[apb.TrainingHold]:
        """The holds that last, the lapsed ones dropped (their session gone, their lease out)."""
        now, out = time.time(), []
        for key, h in list(self._holds.items()):
            if (h.session_id not in self._sessions) if h.session_id else now >= h.expires_at:
                del self._holds[key]
                continue
            hold = apb.TrainingHold(model=key[0], holder=key[1], reason=h.reason,
                                    session_id=h.session_id)
            hold.hold_time.FromNanoseconds(int(h.since * 1e9))
            hold.age.FromNanoseconds(int((now - h.since) * 1e9))
            if h.expires_at:
                hold.lease_expire_time.FromNanoseconds(int(h.expires_at * 1e9))
            out.append(hold)
        return sorted(out, key=lambda h: (h.model, h.hold_time.ToNanoseconds()))

    @_unary
    async def GetLiveSnapshot(
        self, req: apb.GetLiveSnapshotRequest, ctx: _Ctx
    ) -> apb.GetLiveSnapshotResponse:
        live = toy.live_snapshot(self.instance, self._versions, self._episodes.values())
        live.sessions, live.paused = len(self._sessions), self._pause[0] if self._pause else ""
        live.episodes.ended, live.episodes.aborted = self._ended, self._aborted
        return apb.GetLiveSnapshotResponse(snapshot=live)

    @_unary
    async def ListModels(self, req: apb.ListModelsRequest, ctx: _Ctx) -> apb.ListModelsResponse:
        return apb.ListModelsResponse(models=toy.model_infos(self._versions))

    @_unary
    async def PauseGeneration(
        self, req: apb.PauseGenerationRequest, ctx: _Ctx
    ) -> apb.PauseGenerationResponse:
        self.pause(req.reason)
        return apb.PauseGenerationResponse()

    @_unary
    async def ResumeGeneration(
        self, req: apb.ResumeGenerationRequest, ctx: _Ctx
    ) -> apb.ResumeGenerationResponse:
        self.resume()
        return apb.ResumeGenerationResponse()

    # Training: the toy model never trains, so its version is held by construction.
    @_unary
    async def HoldTraining(
        self, req: apb.HoldTrainingRequest, ctx: _Ctx
    ) -> apb.HoldTrainingResponse:
        name = self._model(req.model or next(iter(self._versions)))
        least, default, most = HOLD_LEASE_S
        lease = req.lease.ToNanoseconds() / 1e9 if req.HasField("lease") else None
        if req.session_id and lease is not None:
            raise _invalid("lease", "a hold with a session_id lasts as long as the session; "
                                    "give session_id or lease, not both")
        if lease is not None and not least <= lease <= most:
            raise _invalid("lease", f"must be between {least:g} s and {most:g} s, not {lease:g} s")
        if req.session_id and req.session_id not in self._sessions:
            raise _Abort(_C.NOT_FOUND, "SESSION_NOT_FOUND", f"unknown session {req.session_id!r}",
                         metadata={"session_id": req.session_id})
        now, key = time.time(), (name, req.holder or "admin")
        hold = self._holds.get(key) or FakeHold(req.reason, now, "", 0.0)
        hold.session_id = req.session_id  # holding again re-binds the one hold
        hold.expires_at = 0.0 if req.session_id else now + (lease or default)
        self._holds[key] = hold
        response = apb.HoldTrainingResponse(model=name, policy_version=self._versions[name])
        response.hold.CopyFrom(next(h for h in self._live_holds() if (h.model, h.holder) == key))
        return response

    @_unary
    async def ReleaseTraining(
        self, req: apb.ReleaseTrainingRequest, ctx: _Ctx
    ) -> apb.ReleaseTrainingResponse:
        name = self._model(req.model or next(iter(self._versions)))
        self._holds.pop((name, req.holder or "admin"), None)
        return apb.ReleaseTrainingResponse()

    @_unary
    async def RestoreCheckpoint(
        self, req: apb.RestoreCheckpointRequest, ctx: _Ctx
    ) -> apb.RestoreCheckpointResponse:
        raise _invalid("path", "a toy model writes no checkpoints")

    @_unary
    async def SaveCheckpoint(
        self, req: apb.SaveCheckpointRequest, ctx: _Ctx
    ) -> apb.SaveCheckpointResponse:
        return apb.SaveCheckpointResponse()  # a toy model has nothing to save

    @_unary
    async def DeleteCheckpoint(
        self, req: apb.DeleteCheckpointRequest, ctx: _Ctx
    ) -> apb.DeleteCheckpointResponse:
        if req.model:
            self._model(req.model)
        raise _invalid("path", "a toy model writes no checkpoints")
