"""The async client: the SDK's core. `SwarmClient` (in `_sync`) runs it on a thread."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from swarmrl import _convert
from swarmrl._compat import Self
from swarmrl._config import ClientConfig
from swarmrl._episode import AsyncEpisode, new_request_id
from swarmrl._retry import retry_once_after
from swarmrl._session import Session, is_session_lost
from swarmrl._streams import AsyncEventStream
from swarmrl._transport import Transport
from swarmrl._types import ClientList, EpisodeInfo, ModelInfo, ServerStatus, TrainingState
from swarmrl_proto.v1 import admin_service_pb2 as admin_pb2
from swarmrl_proto.v1 import episode_service_pb2 as episode_pb2
from swarmrl_proto.v1 import session_service_pb2 as session_pb2

__all__ = ["AsyncSwarmClient"]


def resolve_config(
    target: str | None, api_key: str | None, config: ClientConfig | None
) -> ClientConfig:
    """The config from either the shortcuts or a full `ClientConfig` (not both)."""
    if config is not None:
        if target is not None or api_key is not None:
            raise TypeError("pass either target/api_key or config, not both")
        return config
    if target is None:
        return ClientConfig(api_key=api_key)
    return ClientConfig(target=target, api_key=api_key)


class AsyncSwarmClient:
    """Talks to a swarm server from asyncio code.

    .. code-block:: python

        async with AsyncSwarmClient("127.0.0.1:50051") as client:
            async with client.episode(task_id="task-7") as ep:
                completion = await ep.chat([{"role": "user", "content": "2+2?"}])
                await ep.reward(1.0 if "4" in completion.text else 0.0)

    Nothing connects until the first call. The client then keeps one channel, and on
    the first episode opens a session that a background task keeps alive. A server
    that restarts is waited for (see `RetryPolicy`), and a session it forgot is
    reopened, so agent code does not handle either.

    Not thread-safe: use a client from one event loop, the one it was first used
    on. Many tasks on that loop may use it at once. From threads, or from sync code,
    use `SwarmClient`.

    Args:
        target: ``host:port`` of the server (a shortcut for ``ClientConfig(target=...)``).
        api_key: API key (a shortcut for ``ClientConfig(api_key=...)``).
        config: The full configuration; exclusive with ``target`` and ``api_key``.
    """

    def __init__(
        self,
        target: str | None = None,
        *,
        api_key: str | None = None,
        config: ClientConfig | None = None,
    ) -> None:
        self._config = resolve_config(target, api_key, config)
        self._transport = Transport(self._config)
        self._session = Session(self._transport)
        self._closed = False

    def __repr__(self) -> str:
        return f"AsyncSwarmClient(target={self._config.target!r})"

    @property
    def config(self) -> ClientConfig:
        """The client's configuration."""
        return self._config

    @property
    def session_id(self) -> str:
        """Id of this client's session (made by the client; opened with the first episode)."""
        return self._session.id

    async def start_episode(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        agent_version: str = "",
        models: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> AsyncEpisode:
        """Starts an episode; the caller must end or abort it (`episode` does that for you).

        Args:
            task_id: The task the episode plays (e.g. a dataset row id). Episodes are
                grouped by task for advantage estimation.
            group_id: Group within the task (e.g. one GRPO group); None: the task id.
            agent_version: Version of the agent code, so metrics can be split by it.
            models: Models the episode will call; empty: the server's default model.
            labels: Free-form labels stored with the episode.

        Raises:
            NotFoundError: An unknown model.
            InvalidArgumentError: A malformed request.
        """
        await self._session.ensure_open()
        request = episode_pb2.StartEpisodeRequest(
            session_id=self._session.id,
            task_id=task_id,
            group_id=group_id or "",
            agent_version=agent_version,
            models=list(models),
            request_id=new_request_id(),
            labels=dict(labels or {}),
        )

        async def start() -> episode_pb2.StartEpisodeResponse:
            return await self._transport.unary(
                "StartEpisode", lambda s: s.episodes.StartEpisode, request, retryable=True
            )

        response = await retry_once_after(
            start, should_recover=is_session_lost, recover=self._session.reopen
        )
        return AsyncEpisode(
            self._transport,
            episode_id=response.episode_id,
            openai_base_url=response.openai_base_url,
            openai_api_key=response.openai_api_key,
            models=[_convert.model_from_proto(m) for m in response.models],
        )

    @contextlib.asynccontextmanager
    async def episode(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        agent_version: str = "",
        models: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> AsyncIterator[AsyncEpisode]:
        """Runs an episode for the length of an ``async with`` block.

        Leaving the block normally ends the episode, unless it was already ended or
        aborted; if it has no reward the server refuses, the episode is aborted and
        `FailedPreconditionError` (reason ``REWARD_MISSING``) is raised. Leaving the
        block by an exception aborts the episode and re-raises the exception.
        Arguments are as for `start_episode`.
        """
        ep = await self.start_episode(
            task_id, group_id=group_id, agent_version=agent_version, models=models, labels=labels
        )
        try:
            yield ep
        except GeneratorExit:  # the block was never left (the manager was dropped): no I/O
            raise
        except BaseException as exc:
            await ep._finish(exc)
            raise
        await ep._finish(None)

    async def get_episode(self, episode_id: str, *, include_calls: bool = False) -> EpisodeInfo:
        """Fetches an episode, and on request every call recorded in it (with token ids).

        Raises:
            NotFoundError: Unknown episode (reason ``EPISODE_NOT_FOUND``).
        """
        request = episode_pb2.GetEpisodeRequest(episode_id=episode_id, include_calls=include_calls)
        response = await self._transport.unary(
            "GetEpisode", lambda s: s.episodes.GetEpisode, request, retryable=True
        )
        return _convert.episode_from_proto(response.episode)

    async def list_models(self) -> list[ModelInfo]:
        """The models the server hosts."""
        response = await self._transport.unary(
            "ListModels",
            lambda s: s.admin.ListModels,
            admin_pb2.ListModelsRequest(),
            retryable=True,
        )
        return [_convert.model_from_proto(m) for m in response.models]

    async def status(self) -> ServerStatus:
        """The server's state: sessions, episodes, pause, models, newest event, holds of
        training."""
        response = await self._transport.unary(
            "GetStatus", lambda s: s.admin.GetStatus, admin_pb2.GetStatusRequest(), retryable=True
        )
        return _convert.status_from_proto(response)

    async def list_clients(self) -> ClientList:
        """The clients attached now (live sessions) with their tasks, models, agent
        versions and episode counts, and the episode counts of every agent version the
        server has seen (so a client swapped for a new version shows both)."""
        response = await self._transport.unary(
            "ListClients", lambda s: s.admin.ListClients, admin_pb2.ListClientsRequest(),
            retryable=True,
        )
        return _convert.clients_from_proto(response)

    async def live_snapshot(self) -> dict[str, Any]:
        """What the server is doing now (trainer progress per task, open episodes, call
        and token totals, recent errors), as the JSON that ``GET /swarmrl/live`` serves:
        the protos' LiveSnapshot, field names as there. Needs an admin key."""
        response = await self._transport.unary(
            "GetLiveSnapshot", lambda s: s.admin.GetLiveSnapshot,
            admin_pb2.GetLiveSnapshotRequest(), retryable=True,
        )
        return _convert.live_from_proto(response.snapshot)

    async def save_checkpoint(self, model: str | None = None) -> list[str]:
        """Checkpoints a model (None: every trainable model) now; returns the directories
        written. A checkpoint saved on request is kept outside the trainer's automatic
        retention (``keep_checkpoints``), across server restarts too, until
        `delete_checkpoint` removes it. Needs an admin key."""
        response = await self._transport.unary(
            "SaveCheckpoint", lambda s: s.admin.SaveCheckpoint,
            admin_pb2.SaveCheckpointRequest(model=model or ""), retryable=True,
            timeout=self._config.training_call_timeout,
        )
        return list(response.paths)

    async def hold_training(self, model: str | None = None, *, holder: str = "",
                            reason: str = "") -> TrainingState:
        """Holds a model's training: no optimizer step starts until `release_training`.

        A step in progress finishes and its weights are served first, so everything
        generated while the hold lasts comes from the returned policy version: what a
        pinned evaluation needs. Generation goes on. Needs an admin key.

        The hold is a lease bound to this client's session (opened first if it is not
        yet): the session's heartbeat keeps it, and when the client closes, or dies and
        its session lease (`ClientConfig.session_lease`) runs out, the hold lapses and
        training goes on. Holding again as the same `holder` (from this client, or from
        another, e.g. a resumed run's) keeps the one hold and binds it to this client's
        session; `ServerStatus.holds` lists the holds.

        Args:
            model: The model; None: the only trainable model.
            holder: Who holds (holds of different holders stack; each lifts its own).
            reason: Why, in words (logged, and listed in `ServerStatus.holds`).

        Raises:
            FailedPreconditionError: The model is not trained here (``NOT_TRAINABLE``).
        """
        await self._session.ensure_open()

        async def hold() -> admin_pb2.HoldTrainingResponse:
            request = admin_pb2.HoldTrainingRequest(
                model=model or "", holder=holder, reason=reason, session_id=self._session.id)
            return await self._transport.unary(
                "HoldTraining", lambda s: s.admin.HoldTraining, request, retryable=True,
                timeout=self._config.training_call_timeout)

        response = await retry_once_after(
            hold, should_recover=is_session_lost, recover=self._session.reopen)
        return TrainingState(response.model, response.policy_version, response.step)

    async def release_training(self, model: str | None = None, *, holder: str = "") -> None:
        """Lifts `holder`'s hold of a model's training (see `hold_training`)."""
        request = admin_pb2.ReleaseTrainingRequest(model=model or "", holder=holder)
        await self._transport.unary(
            "ReleaseTraining", lambda s: s.admin.ReleaseTraining, request, retryable=True)

    async def restore_checkpoint(self, path: str, model: str | None = None) -> TrainingState:
        """Serves a checkpoint the server wrote (a `save_checkpoint` path, or its step:
        ``"12"`` or ``"step-12"``) as a new policy version of its model;
        `TrainingState.step` is the checkpoint's step. Needs an admin key.

        Raises:
            InvalidArgumentError: `path` is not a checkpoint of the model (``field`` "path").
        """
        request = admin_pb2.RestoreCheckpointRequest(model=model or "", path=path)
        response = await self._transport.unary(
            "RestoreCheckpoint", lambda s: s.admin.RestoreCheckpoint, request, retryable=True,
            timeout=self._config.training_call_timeout)
        return TrainingState(response.model, response.policy_version, response.checkpoint_step)

    async def delete_checkpoint(self, path: str, model: str | None = None) -> None:
        """Removes a checkpoint of a model (a `save_checkpoint` path) that is no longer
        wanted, e.g. one kept for an evaluation that is neither the best by validation
        nor the latest. Needs an admin key.

        A retry after a lost answer may find the checkpoint already gone
        (`NotFoundError`): the checkpoint is gone either way.

        Args:
            path: The checkpoint directory, as `save_checkpoint` returned it.
            model: The model; None: the only trainable model.

        Raises:
            InvalidArgumentError: `path` is not a checkpoint directory of the model
                (``field`` "path").
            NotFoundError: No checkpoint is there (``field`` "path").
            FailedPreconditionError: It is the model's newest checkpoint, the one a
                restarted server resumes from (``field`` "path").
        """
        request = admin_pb2.DeleteCheckpointRequest(model=model or "", path=path)
        await self._transport.unary(
            "DeleteCheckpoint", lambda s: s.admin.DeleteCheckpoint, request, retryable=True,
            timeout=self._config.training_call_timeout)

    async def declare_done(self, model: str | None = None) -> None:
        """Declares this client's share of the current training batch done.

        With the trainer's batch rule ``clients`` a batch is ready once every client
        with a live session has declared; the declaration then resets.

        Args:
            model: The model whose batch is meant; None: every trainable model.

        Raises:
            NotFoundError: An unknown model.
            FailedPreconditionError: No such model is trainable (reason ``NOT_TRAINABLE``).
        """
        await self._session.ensure_open()

        async def declare() -> object:
            request = session_pb2.DeclareDoneRequest(session_id=self._session.id, model=model or "")
            return await self._transport.unary(
                "DeclareDone", lambda s: s.sessions.DeclareDone, request, retryable=True
            )

        await retry_once_after(declare, should_recover=is_session_lost, recover=self._session.reopen)

    def events(self, after_sequence: int = 0) -> AsyncEventStream:
        """Watches the server's events (policy versions, pauses, draining).

        The stream reconnects by itself and resumes after the last event seen.

        Args:
            after_sequence: Only events after this sequence number; 0 for all the
                server retains.
        """
        return AsyncEventStream(self._transport, after_sequence)

    async def close(self) -> None:
        """Closes the session (aborting its open episodes) and the channel. Idempotent."""
        if self._closed:
            return
        self._closed = True
        await self._session.close()
        await self._transport.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
