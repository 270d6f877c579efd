"""The sync facade: the async core, run on one private event-loop thread per client.

Each blocking method submits a coroutine to the client's loop thread and waits
for it; the library never calls ``asyncio.run``, so a sync client also works in
programs that run their own event loop (a notebook, say), and one client can
serve many threads at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from swarmrl._client import AsyncSwarmClient
from swarmrl._compat import Self, Unpack
from swarmrl._config import ClientConfig
from swarmrl._episode import AsyncEpisode
from swarmrl._sampling import DEFAULT, SamplingOptions, SamplingParams
from swarmrl._streams import AsyncCompletionStream, AsyncEventStream
from swarmrl._types import (
    ChatMessage,
    ClientList,
    Completion,
    EpisodeInfo,
    EpisodeState,
    Event,
    GenerationChunk,
    ModelInfo,
    ServerStatus,
    Tool,
    TrainingState,
)

__all__ = ["CompletionStream", "Episode", "EventStream", "SwarmClient"]

T = TypeVar("T")


class _LoopThread:
    """A daemon thread running an event loop, and a way to run coroutines on it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="swarmrl-client", daemon=True
        )
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs `coro` on the loop and blocks until it finishes (or the caller is interrupted)."""
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a SwarmClient method was called from its own loop thread")
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("the swarmrl client is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. KeyboardInterrupt: don't leave the call running
            raise

    def stop(self) -> None:
        """Stops the loop and joins the thread."""
        if self._loop.is_closed():
            return
        self.run(self._loop.shutdown_asyncgens())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


class CompletionStream:
    """The sync twin of `AsyncCompletionStream`: iterate for chunks, then read `completion`.

    .. code-block:: python

        with ep.stream(messages) as stream:
            for chunk in stream:
                print(chunk.text, end="")
        completion = stream.completion
    """

    def __init__(self, stream: AsyncCompletionStream, runner: _LoopThread) -> None:
        self._stream = stream
        self._runner = runner

    @property
    def completion(self) -> Completion:
        """The final record of the call, once the stream is exhausted.

        Raises:
            RuntimeError: The stream has not been read to its end.
        """
        return self._stream.completion

    def get_final_completion(self) -> Completion:
        """Reads the rest of the stream and returns the completion."""
        return self._runner.run(self._stream.get_final_completion())

    def __iter__(self) -> Iterator[GenerationChunk]:
        return self

    def __next__(self) -> GenerationChunk:
        try:
            return self._runner.run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stops reading; a generation still running is cancelled."""
        self._runner.run(self._stream.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class EventStream:
    """The sync twin of `AsyncEventStream`: the server's events, surviving reconnects."""

    def __init__(self, stream: AsyncEventStream, runner: _LoopThread) -> None:
        self._stream = stream
        self._runner = runner

    @property
    def last_sequence(self) -> int:
        """Sequence number of the last event received (or the starting point)."""
        return self._stream.last_sequence

    def __iter__(self) -> Iterator[Event]:
        return self

    def __next__(self) -> Event:
        try:
            return self._runner.run(self._stream.__anext__())
        except StopAsyncIteration:
            raise StopIteration from None

    def close(self) -> None:
        """Stops watching."""
        self._runner.run(self._stream.aclose())

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Episode:
    """The sync twin of `AsyncEpisode`; see it for the meaning of every method.

    Safe to use from several threads; each call runs independently.
    """

    def __init__(self, episode: AsyncEpisode, runner: _LoopThread) -> None:
        self._episode = episode
        self._runner = runner

    def __repr__(self) -> str:
        return f"Episode(id={self.id!r}, state={self.state!r})"

    @property
    def id(self) -> str:
        """The episode id."""
        return self._episode.id

    @property
    def openai_base_url(self) -> str:
        """Base URL (ending in /v1) of the server's OpenAI-compatible API: the same for
        every episode of the server (the key or `http_headers` names the episode)."""
        return self._episode.openai_base_url

    @property
    def openai_api_key(self) -> str:
        """API key that addresses this episode on the OpenAI-compatible API."""
        return self._episode.openai_api_key

    @property
    def http_headers(self) -> dict[str, str]:
        """Headers that address this episode on `openai_base_url` whatever
        `Authorization` a shared client sends (see `AsyncEpisode.http_headers`)."""
        return self._episode.http_headers

    @property
    def models(self) -> list[ModelInfo]:
        """The models the episode may call, as they were when it started."""
        return self._episode.models

    @property
    def state(self) -> EpisodeState:
        """The state as far as this client knows: "open" until it ends or aborts it."""
        return self._episode.state

    def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        tools: Sequence[Tool] | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> Completion:
        """Generates a reply to chat messages (see `AsyncEpisode.chat`)."""
        return self._runner.run(self._episode.chat(
            messages, model=model, tools=tools, sampling=sampling, **options))

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        tools: Sequence[Tool] | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> CompletionStream:
        """Generates a reply to chat messages, streaming its tokens (see `AsyncEpisode.stream`)."""
        stream = self._episode.stream(
            messages,
            model=model,
            tools=tools,
            sampling=sampling,
            **options,
        )
        return CompletionStream(stream, self._runner)

    def generate_tokens(
        self,
        token_ids: Sequence[int],
        *,
        model: str | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> Completion:
        """Generates from a token-id prompt (see `AsyncEpisode.generate_tokens`)."""
        return self._runner.run(self._episode.generate_tokens(
            token_ids, model=model, sampling=sampling, **options))

    def stream_tokens(
        self,
        token_ids: Sequence[int],
        *,
        model: str | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> CompletionStream:
        """Generates from a token-id prompt, streaming (see `AsyncEpisode.stream_tokens`)."""
        stream = self._episode.stream_tokens(
            token_ids,
            model=model,
            sampling=sampling,
            **options,
        )
        return CompletionStream(stream, self._runner)

    def reward(
        self, value: float, call_id: str | None = None, *, model: str | None = None
    ) -> float | None:
        """Records a reward for the episode, one of its models or one of its calls (see
        `AsyncEpisode.reward`)."""
        return self._runner.run(self._episode.reward(value, call_id, model=model))

    def end(
        self, reward: float | None = None, *, model_rewards: Mapping[str, float] | None = None
    ) -> EpisodeInfo:
        """Ends the episode, with per-model rewards if given (see `AsyncEpisode.end`)."""
        return self._runner.run(self._episode.end(reward, model_rewards=model_rewards))

    def abort(self, reason: str = "") -> EpisodeInfo:
        """Aborts the episode (see `AsyncEpisode.abort`)."""
        return self._runner.run(self._episode.abort(reason))


class SwarmClient:
    """Talks to a swarm server from ordinary (sync) code.

    .. code-block:: python

        with SwarmClient("127.0.0.1:50051") as client:
            with client.episode(task_id="task-7") as ep:
                completion = ep.chat([{"role": "user", "content": "2+2?"}])
                ep.reward(1.0 if "4" in completion.text else 0.0)

    An honest facade over `AsyncSwarmClient`: the client runs the async core on
    one private background thread with its own event loop, and each method blocks
    until its call is done. Thread-safe: any number of threads may share one client
    (and its episodes); their calls run concurrently. Call `close` (or use
    ``with``) to stop the thread.

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
        self._async = AsyncSwarmClient(target, api_key=api_key, config=config)
        self._runner = _LoopThread()
        self._close_lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"SwarmClient(target={self.config.target!r})"

    @property
    def config(self) -> ClientConfig:
        """The client's configuration."""
        return self._async.config

    @property
    def session_id(self) -> str:
        """Id of this client's session (made by the client; opened with the first episode)."""
        return self._async.session_id

    def start_episode(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        agent_version: str = "",
        models: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> Episode:
        """Starts an episode; the caller must end or abort it (see `AsyncSwarmClient`)."""
        ep = self._runner.run(
            self._async.start_episode(
                task_id,
                group_id=group_id,
                agent_version=agent_version,
                models=models,
                labels=labels,
            )
        )
        return Episode(ep, self._runner)

    @contextlib.contextmanager
    def episode(
        self,
        task_id: str,
        *,
        group_id: str | None = None,
        agent_version: str = "",
        models: Sequence[str] = (),
        labels: Mapping[str, str] | None = None,
    ) -> Iterator[Episode]:
        """Runs an episode for the length of a ``with`` block (see `AsyncSwarmClient.episode`)."""
        ep = self.start_episode(
            task_id, group_id=group_id, agent_version=agent_version, models=models, labels=labels
        )
        try:
            yield ep
        except GeneratorExit:  # the block was never left (the manager was dropped): no I/O
            raise
        except BaseException as exc:
            self._runner.run(ep._episode._finish(exc))
            raise
        self._runner.run(ep._episode._finish(None))

    def get_episode(self, episode_id: str, *, include_calls: bool = False) -> EpisodeInfo:
        """Fetches an episode (see `AsyncSwarmClient.get_episode`)."""
        return self._runner.run(self._async.get_episode(episode_id, include_calls=include_calls))

    def list_models(self) -> list[ModelInfo]:
        """The models the server hosts."""
        return self._runner.run(self._async.list_models())

    def status(self) -> ServerStatus:
        """The server's state, holds of training included (see `AsyncSwarmClient.status`)."""
        return self._runner.run(self._async.status())

    def list_clients(self) -> ClientList:
        """The clients attached now and every agent version's episode counts (see
        `AsyncSwarmClient.list_clients`)."""
        return self._runner.run(self._async.list_clients())

    def live_snapshot(self) -> dict[str, Any]:
        """What the server is doing now, as ``GET /swarmrl/live``'s JSON (see
        `AsyncSwarmClient.live_snapshot`)."""
        return self._runner.run(self._async.live_snapshot())

    def save_checkpoint(self, model: str | None = None) -> list[str]:
        """Checkpoints a model now (see `AsyncSwarmClient.save_checkpoint`)."""
        return self._runner.run(self._async.save_checkpoint(model))

    def hold_training(self, model: str | None = None, *, holder: str = "",
                      reason: str = "") -> TrainingState:
        """Holds a model's training, a lease bound to this client's session (see
        `AsyncSwarmClient.hold_training`)."""
        return self._runner.run(self._async.hold_training(model, holder=holder, reason=reason))

    def release_training(self, model: str | None = None, *, holder: str = "") -> None:
        """Lifts a hold of a model's training (see `AsyncSwarmClient.release_training`)."""
        self._runner.run(self._async.release_training(model, holder=holder))

    def restore_checkpoint(self, path: str, model: str | None = None) -> TrainingState:
        """Serves a checkpoint as a new policy version (see
        `AsyncSwarmClient.restore_checkpoint`)."""
        return self._runner.run(self._async.restore_checkpoint(path, model))

    def delete_checkpoint(self, path: str, model: str | None = None) -> None:
        """Removes a checkpoint of a model (see `AsyncSwarmClient.delete_checkpoint`)."""
        self._runner.run(self._async.delete_checkpoint(path, model))

    def declare_done(self, model: str | None = None) -> None:
        """Declares this client's share of the current batch done (see
        `AsyncSwarmClient.declare_done`)."""
        self._runner.run(self._async.declare_done(model))

    def events(self, after_sequence: int = 0) -> EventStream:
        """Watches the server's events (see `AsyncSwarmClient.events`)."""
        return EventStream(self._async.events(after_sequence), self._runner)

    def close(self) -> None:
        """Closes the session and channel and stops the background thread. Idempotent."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._runner.run(self._async.close())
        finally:
            self._runner.stop()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
