"""Thin gRPC servicers over the swarm's domain objects (one class per service)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator

from google.protobuf import duration_pb2

from swarmrl_proto.v1 import admin_service_pb2 as admin_pb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from swarmrl_server.engine.base import GenerationChunk
from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.episodes.coalesce import coalesced
from swarmrl_server.errors import invalid
from swarmrl_server.grpc import convert
from swarmrl_server.grpc.auth import principal_of
from swarmrl_server.grpc.errors import translate_errors
from swarmrl_server.grpc.handlers import Context
from swarmrl_server.observe import live
from swarmrl_server.security import KeyRing, Principal
from swarmrl_server.swarm import Swarm, TrainingHold


def _duration(seconds: float) -> duration_pb2.Duration:
    d = duration_pb2.Duration()
    d.FromNanoseconds(int(seconds * 1e9))
    return d


class _Owned:
    """Resolves each RPC's caller to the principal that owns what it opens."""

    def __init__(self, swarm: Swarm, keys: KeyRing | None = None) -> None:
        self.swarm = swarm
        self._keys = keys or KeyRing()

    def caller(self, context: Context) -> Principal:
        return principal_of(self._keys, context.invocation_metadata())


class SessionServicer(_Owned, s_grpc.SessionServiceServicer):
    @translate_errors
    async def OpenSession(self, request: s_pb.OpenSessionRequest, context: Context) -> s_pb.OpenSessionResponse:
        lease = request.lease.ToNanoseconds() / 1e9 if request.HasField("lease") else None
        s = await self.swarm.sessions.open(
            request.session_id, request.client_name, lease, caller=self.caller(context)
        )
        self.swarm.note_agent_version(s.session_id, request.agent_version)
        return s_pb.OpenSessionResponse(
            session_id=s.session_id, lease=_duration(s.lease_s),
            server_instance=self.swarm.instance,
        )

    @translate_errors
    async def Heartbeat(self, request: s_pb.HeartbeatRequest, context: Context) -> s_pb.HeartbeatResponse:
        s = await self.swarm.sessions.heartbeat(request.session_id, caller=self.caller(context))
        return s_pb.HeartbeatResponse(
            lease=_duration(s.lease_s),
            open_episodes=len(self.swarm.episodes.open_in_session(s.session_id)),
        )

    @translate_errors
    async def CloseSession(self, request: s_pb.CloseSessionRequest, context: Context) -> s_pb.CloseSessionResponse:
        aborted = await self.swarm.sessions.close(
            request.session_id, caller=self.caller(context)
        )
        return s_pb.CloseSessionResponse(aborted_episodes=aborted)

    @translate_errors
    async def DeclareDone(self, request: s_pb.DeclareDoneRequest, context: Context) -> s_pb.DeclareDoneResponse:
        self.swarm.declare_done(request.session_id, request.model, caller=self.caller(context))
        return s_pb.DeclareDoneResponse()

    @translate_errors
    async def WatchEvents(
        self, request: s_pb.WatchEventsRequest, context: Context
    ) -> AsyncIterator[s_pb.WatchEventsResponse]:
        async for sequence, kind, payload in self.swarm.events.watch(request.after_sequence):
            event = s_pb.WatchEventsResponse(sequence=sequence)
            if kind == "policy_version_changed":
                event.policy_version_changed.CopyFrom(s_pb.PolicyVersionChanged(**payload))
            elif kind == "pausing":
                event.pausing.CopyFrom(s_pb.Pausing(**payload))
            elif kind == "resumed":
                event.resumed.CopyFrom(s_pb.Resumed(**payload))
            elif kind == "draining":
                event.draining.CopyFrom(s_pb.Draining(grace=_duration(payload["grace_s"])))
            yield event


class EpisodeServicer(_Owned, ep_grpc.EpisodeServiceServicer):
    @translate_errors
    async def StartEpisode(self, request: ep_pb.StartEpisodeRequest, context: Context) -> ep_pb.StartEpisodeResponse:
        if not request.session_id:
            raise invalid("session_id", "must not be empty; open a session first")
        record, key = await self.swarm.episodes.start(
            session_id=request.session_id, task_id=request.task_id, group_id=request.group_id,
            agent_version=(request.agent_version
                           or self.swarm.session_agent_version(request.session_id)),
            models=list(request.models),
            request_id=request.request_id, labels=dict(request.labels),
            caller=self.caller(context),
        )
        return ep_pb.StartEpisodeResponse(
            episode_id=record.episode_id,
            openai_base_url=self.swarm.openai_base_url,
            openai_api_key=key,
            models=[convert.model_to_proto(self.swarm.models[m]) for m in record.models],
        )

    @translate_errors
    async def Generate(
        self, request: ep_pb.GenerateRequest, context: Context
    ) -> AsyncIterator[ep_pb.GenerateResponse]:
        stream = self.swarm.episodes.generate(self._call_of(request, context))
        if request.result_only:
            # No chunk is sent, so none is joined either: the engine's stream is read in
            # this task, with no pump task and queue between (see coalesce.py).
            async for item in stream:
                if not isinstance(item, GenerationChunk):
                    yield ep_pb.GenerateResponse(result=_result_to_proto(item))
            return
        async for item in coalesced(stream):
            if isinstance(item, GenerationChunk):
                yield ep_pb.GenerateResponse(chunk=ep_pb.GenerateChunk(
                    token_ids=item.token_ids, logprobs=item.logprobs, text=item.text))
            else:
                yield ep_pb.GenerateResponse(result=_result_to_proto(item))

    def _call_of(self, request: ep_pb.GenerateRequest, context: Context) -> GenerateCall:
        """The domain's call for a Generate request (its input: chat or token ids)."""
        kind = request.WhichOneof("input")
        chat = kind == "chat"
        return GenerateCall(
            request.episode_id, self.caller(context), model=request.model,
            messages=convert.messages_from_proto(request.chat.messages, "input.chat.messages")
            if chat else None,
            tools=convert.tools_from_proto(request.chat.tools) if chat else None,
            token_ids=list(request.tokens.token_ids) if kind == "tokens" else None,
            sampling=convert.sampling_from_proto(request.sampling),
            request_id=request.request_id, input_field=f"input.{kind}" if kind else "input",
        )

    @translate_errors
    async def SubmitReward(self, request: ep_pb.SubmitRewardRequest, context: Context) -> ep_pb.SubmitRewardResponse:
        episodes, caller = self.swarm.episodes, self.caller(context)
        if request.model and request.call_id:
            raise invalid("model", "give call_id or model, not both")
        if request.model:
            own = await episodes.submit_model_reward(
                request.episode_id, request.model, request.value, caller=caller)
            reward = (await episodes.get(request.episode_id, caller=caller)).reward
        else:
            reward = await episodes.submit_reward(
                request.episode_id, request.value, request.call_id, caller=caller)
            own = (await episodes.get(request.episode_id, caller=caller)).model_rewards
        response = ep_pb.SubmitRewardResponse(model_rewards=own)
        if reward is not None:
            response.episode_reward = reward
        return response

    @translate_errors
    async def EndEpisode(self, request: ep_pb.EndEpisodeRequest, context: Context) -> ep_pb.EndEpisodeResponse:
        reward = request.reward if request.HasField("reward") else None
        record = await self.swarm.episodes.end(
            request.episode_id, reward, request.request_id, caller=self.caller(context),
            model_rewards=dict(request.model_rewards),
        )
        return ep_pb.EndEpisodeResponse(episode=convert.episode_to_proto(record))

    @translate_errors
    async def AbortEpisode(self, request: ep_pb.AbortEpisodeRequest, context: Context) -> ep_pb.AbortEpisodeResponse:
        record = await self.swarm.episodes.abort(
            request.episode_id, request.reason, request.request_id, caller=self.caller(context)
        )
        return ep_pb.AbortEpisodeResponse(episode=convert.episode_to_proto(record))

    @translate_errors
    async def GetEpisode(self, request: ep_pb.GetEpisodeRequest, context: Context) -> ep_pb.GetEpisodeResponse:
        record = await self.swarm.episodes.get(
            request.episode_id, with_calls=request.include_calls, caller=self.caller(context)
        )
        return ep_pb.GetEpisodeResponse(episode=convert.episode_to_proto(record))


def _hold(h: TrainingHold) -> admin_pb.TrainingHold:
    hold = admin_pb.TrainingHold(
        model=h.model, holder=h.holder, reason=h.reason, session_id=h.session_id,
        hold_time=convert.timestamp_of(h.since), age=_duration(max(0.0, time.time() - h.since)))
    if h.expires_at:
        hold.lease_expire_time.CopyFrom(convert.timestamp_of(h.expires_at))
    return hold


def _result_to_proto(r: GenerationResult) -> ep_pb.GenerateResult:
    c = r.call
    return ep_pb.GenerateResult(
        call_id=c.call_id,
        finish_reason=convert.FINISH_ENUMS.get(r.finish_reason, t_pb.FINISH_REASON_UNSPECIFIED),
        prompt_ids=c.prompt_ids, completion_ids=c.completion_ids, logprobs=c.logprobs,
        policy_version=c.policy_version, version_spans=convert.version_spans_to_proto(c),
        text=c.text, message=convert.message_to_proto(r.message),
        usage=t_pb.Usage(prompt_tokens=len(c.prompt_ids), completion_tokens=len(c.completion_ids)),
        top_logprobs=[
            ep_pb.TopLogprobs(entries=[ep_pb.TopLogprob(token_id=t, logprob=lp) for t, lp in alts])
            for alts in c.top_logprobs
        ],
        model=c.model,
    )


class AdminServicer(admin_grpc.AdminServiceServicer):
    def __init__(self, swarm: Swarm) -> None:
        self.swarm = swarm

    def _models(self) -> list[t_pb.ModelInfo]:
        return [convert.model_to_proto(h) for h in self.swarm.models.values()]

    @translate_errors
    async def GetStatus(self, request: admin_pb.GetStatusRequest, context: Context) -> admin_pb.GetStatusResponse:
        status = await self.swarm.status()
        return admin_pb.GetStatusResponse(
            models=self._models(), holds=[_hold(h) for h in self.swarm.training_holds()],
            **status)

    @translate_errors
    async def ListModels(self, request: admin_pb.ListModelsRequest, context: Context) -> admin_pb.ListModelsResponse:
        return admin_pb.ListModelsResponse(models=self._models())

    @translate_errors
    async def PauseGeneration(self, request: admin_pb.PauseGenerationRequest, context: Context) -> admin_pb.PauseGenerationResponse:
        await self.swarm.pause(request.reason)
        return admin_pb.PauseGenerationResponse()

    @translate_errors
    async def ResumeGeneration(self, request: admin_pb.ResumeGenerationRequest, context: Context) -> admin_pb.ResumeGenerationResponse:
        await self.swarm.resume()
        return admin_pb.ResumeGenerationResponse()

    @translate_errors
    async def ListClients(self, request: admin_pb.ListClientsRequest, context: Context) -> admin_pb.ListClientsResponse:
        clients, versions = await self.swarm.list_clients()
        return admin_pb.ListClientsResponse(
            clients=[
                admin_pb.ClientInfo(
                    session_id=c.session_id, client_name=c.client_name,
                    agent_version=c.agent_version,
                    episode_agent_versions=sorted(c.episode_agent_versions),
                    tasks=sorted(c.tasks), models=sorted(c.models),
                    open_episodes=c.open_episodes, ended_episodes=c.ended_episodes,
                    aborted_episodes=c.aborted_episodes,
                    lease_expire_time=convert.timestamp_of(c.lease_expires_at),
                )
                for c in clients
            ],
            agent_versions=[admin_pb.AgentVersionInfo(**vars(v)) for v in versions],
        )

    @translate_errors
    async def GetLiveSnapshot(self, request: admin_pb.GetLiveSnapshotRequest, context: Context) -> admin_pb.GetLiveSnapshotResponse:
        return admin_pb.GetLiveSnapshotResponse(snapshot=live.snapshot(self.swarm))

    @translate_errors
    async def HoldTraining(self, request: admin_pb.HoldTrainingRequest, context: Context) -> admin_pb.HoldTrainingResponse:
        lease = request.lease.ToNanoseconds() / 1e9 if request.HasField("lease") else None
        model, version, step = await self.swarm.hold_training(
            request.model, request.holder, request.reason, session_id=request.session_id,
            lease_s=lease)
        response = admin_pb.HoldTrainingResponse(model=model, policy_version=version, step=step)
        hold = self.swarm.training_hold(model, request.holder)
        if hold is not None:  # None only when it lapsed already (its session just ended)
            response.hold.CopyFrom(_hold(hold))
        return response

    @translate_errors
    async def ReleaseTraining(self, request: admin_pb.ReleaseTrainingRequest, context: Context) -> admin_pb.ReleaseTrainingResponse:
        self.swarm.release_training(request.model, request.holder)
        return admin_pb.ReleaseTrainingResponse()

    @translate_errors
    async def RestoreCheckpoint(self, request: admin_pb.RestoreCheckpointRequest, context: Context) -> admin_pb.RestoreCheckpointResponse:
        model, version, step = await self.swarm.restore_checkpoint(request.model, request.path)
        return admin_pb.RestoreCheckpointResponse(model=model, policy_version=version, checkpoint_step=step)

    @translate_errors
    async def SaveCheckpoint(self, request: admin_pb.SaveCheckpointRequest, context: Context) -> admin_pb.SaveCheckpointResponse:
        paths = await self.swarm.save_checkpoints(request.model)
        return admin_pb.SaveCheckpointResponse(paths=[str(p) for p in paths])

    @translate_errors
    async def DeleteCheckpoint(self, request: admin_pb.DeleteCheckpointRequest, context: Context) -> admin_pb.DeleteCheckpointResponse:
        await self.swarm.delete_checkpoint(request.model, request.path)
        return admin_pb.DeleteCheckpointResponse()
