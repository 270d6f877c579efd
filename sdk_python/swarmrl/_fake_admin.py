"""The fake server's AdminService (`swarmrl.testing.FakeSwarmServer` mixes it in): status,
models, pause and resume, and the training RPCs a toy model answers trivially."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from google.protobuf.message import Message

from swarmrl import _fake_model as toy
from swarmrl._fake_rpc import _Ctx, _EventLog, _invalid, _unary
from swarmrl_proto.v1 import admin_service_pb2 as apb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import types_pb2

_OPEN = types_pb2.EPISODE_STATE_OPEN


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
        )

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
        return apb.HoldTrainingResponse(model=name, policy_version=self._versions[name])

    @_unary
    async def ReleaseTraining(
        self, req: apb.ReleaseTrainingRequest, ctx: _Ctx
    ) -> apb.ReleaseTrainingResponse:
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
