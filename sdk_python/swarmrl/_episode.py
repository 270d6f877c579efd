"""An episode: the calls an agent makes for one task, its reward, and its end."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence

import structlog

from swarmrl import _convert
from swarmrl._compat import Unpack
from swarmrl._errors import FailedPreconditionError, StreamInterruptedError, SwarmError
from swarmrl._sampling import DEFAULT, SamplingOptions, SamplingParams
from swarmrl._streams import AsyncCompletionStream, GenerateCall
from swarmrl._transport import Transport
from swarmrl._types import ChatMessage, Completion, EpisodeInfo, EpisodeState, ModelInfo, Tool
from swarmrl_proto.v1 import episode_service_pb2 as episode_pb2

__all__ = ["AsyncEpisode"]

_log = structlog.get_logger("swarmrl")


EPISODE_HEADER = "X-Swarmrl-Episode"
"""The HTTP header that names a request's episode by its key on the server's plain
`/v1` URL (it wins over `Authorization`)."""


def new_request_id() -> str:
    """A fresh idempotency key: made once per logical call, reused by its retries."""
    return uuid.uuid4().hex


class AsyncEpisode:
    """An open episode on the server. Made by `AsyncSwarmClient.episode` or `start_episode`.

    Every model call made through it (`chat`, `stream`, `generate_tokens`) is
    recorded on the server with its exact token ids, logprobs and policy version.
    Give it a reward with `reward` or `end(reward=...)`; only ended episodes are
    trained. Other programs can make the episode's calls through the
    OpenAI-compatible API at `openai_base_url` with `openai_api_key`, or, sharing one
    HTTP client across many episodes, with `http_headers` on each request.

    Not thread-safe; use it from the client's event loop. Concurrent calls from
    several tasks are fine.
    """

    def __init__(
        self,
        transport: Transport,
        *,
        episode_id: str,
        openai_base_url: str,
        openai_api_key: str,
        models: list[ModelInfo],
    ) -> None:
        self._transport = transport
        self._id = episode_id
        self._openai_base_url = openai_base_url
        self._openai_api_key = openai_api_key
        self._models = models
        self._state: EpisodeState = "open"

    def __repr__(self) -> str:
        return f"AsyncEpisode(id={self._id!r}, state={self._state!r})"

    @property
    def id(self) -> str:
        """The episode id."""
        return self._id

    @property
    def openai_base_url(self) -> str:
        """Base URL (ending in /v1) of the server's OpenAI-compatible API: the same for
        every episode of the server (the key or `http_headers` names the episode), so a
        harness can keep one HTTP client, and its connections, for a whole run."""
        return self._openai_base_url

    @property
    def openai_api_key(self) -> str:
        """API key that addresses this episode on the OpenAI-compatible API."""
        return self._openai_api_key

    @property
    def http_headers(self) -> dict[str, str]:
        """Headers that address this episode on `openai_base_url` (also the Anthropic
        API's `/v1/messages`) whatever `Authorization` a shared client sends: pass them
        per request, e.g. ``client.chat.completions.create(...,
        extra_headers=ep.http_headers)`` on one `openai.AsyncOpenAI` for every episode."""
        return {EPISODE_HEADER: self._openai_api_key}

    @property
    def models(self) -> list[ModelInfo]:
        """The models the episode may call, as they were when it started."""
        return list(self._models)

    @property
    def state(self) -> EpisodeState:
        """The state as far as this client knows: "open" until it ends or aborts it."""
        return self._state

    def stream(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        tools: Sequence[Tool] | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> AsyncCompletionStream:
        """Generates a reply to chat messages, streaming its tokens.

        The server renders the messages with the model's chat template. Arguments are
        as for `chat`. The call starts when the stream is first iterated.

        Raises:
            InvalidArgumentError: A message or tool is malformed (checked here, at once).
        """
        return self._call(model, sampling.with_options(options),
                          chat=_convert.chat_input(messages, tools))

    def stream_tokens(
        self,
        token_ids: Sequence[int],
        *,
        model: str | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> AsyncCompletionStream:
        """Generates a continuation of a token-id prompt, used as it is, streaming its tokens.

        Arguments are as for `generate_tokens`.
        """
        return self._call(model, sampling.with_options(options),
                          tokens=episode_pb2.TokenInput(token_ids=list(token_ids)))

    def _call(
        self, model: str | None, sampling: SamplingParams, *, result_only: bool = False,
        chat: episode_pb2.ChatInput | None = None, tokens: episode_pb2.TokenInput | None = None,
    ) -> AsyncCompletionStream:
        """The one place a Generate request is built (a fresh request_id per call)."""
        request = episode_pb2.GenerateRequest(
            episode_id=self._id, model=model or "", chat=chat, tokens=tokens,
            sampling=_convert.sampling(sampling), request_id=new_request_id(),
            result_only=result_only,
        )
        return AsyncCompletionStream(GenerateCall(self._transport, request))

    async def chat(
        self,
        messages: Sequence[ChatMessage],
        *,
        model: str | None = None,
        tools: Sequence[Tool] | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> Completion:
        """Generates a reply to chat messages.

        Args:
            messages: OpenAI-style messages (role, content, and tool_calls,
                tool_call_id, name where they apply).
            model: Model to call; None calls the episode's first model.
            tools: OpenAI-style function tools the model may call.
            sampling: How to sample (`SamplingParams`); default: the server's defaults.
            **options: Any field of `SamplingParams` (``temperature``, ``top_p``,
                ``max_tokens``, ``stop``, ``stop_token_ids``, ``seed``,
                ``top_logprobs``), overriding `sampling`'s.

        Returns:
            The recorded call: text, assistant message, exact token ids, logprobs and
            policy version.

        Raises:
            InvalidArgumentError: Bad input; ``.field`` names the field.
            NotFoundError: Unknown episode or model.
            FailedPreconditionError: The episode is no longer open.
        """
        # result_only: the server sends the finished call as one message, no chunks.
        return await _complete_whole(self._call(
            model, sampling.with_options(options), result_only=True,
            chat=_convert.chat_input(messages, tools),
        ))

    async def generate_tokens(
        self,
        token_ids: Sequence[int],
        *,
        model: str | None = None,
        sampling: SamplingParams = DEFAULT,
        **options: Unpack[SamplingOptions],
    ) -> Completion:
        """Generates a continuation of a prompt given as token ids (token in, token out).

        The ids are used exactly as given; no chat template is applied. Other
        arguments are as for `chat`.
        """
        return await _complete_whole(self._call(
            model, sampling.with_options(options), result_only=True,
            tokens=episode_pb2.TokenInput(token_ids=list(token_ids)),
        ))

    async def reward(
        self, value: float, call_id: str | None = None, *, model: str | None = None
    ) -> float | None:
        """Records a reward for the episode, for one of its models, or for one of its calls.

        A later reward for the same target replaces an earlier one. A model's own
        reward is what its trainer uses; models without one get the episode's.

        Args:
            value: The reward; must be finite.
            call_id: The `Completion.call_id` to reward, or None.
            model: A model of the episode to reward on its own (not with `call_id`).

        Returns:
            The episode's reward after this call, if it has one.
        """
        request = episode_pb2.SubmitRewardRequest(
            episode_id=self._id, value=value, call_id=call_id or "", request_id=new_request_id(),
            model=model or "",
        )
        response = await self._transport.unary(
            "SubmitReward", lambda s: s.episodes.SubmitReward, request, retryable=True
        )
        return response.episode_reward if response.HasField("episode_reward") else None

    async def end(
        self, reward: float | None = None, *, model_rewards: Mapping[str, float] | None = None
    ) -> EpisodeInfo:
        """Ends the episode; once this returns it is durable and queued for training by
        every model it lists (all of them or, if the server dies meanwhile, none).

        Args:
            reward: The final reward; may be omitted if `reward` already set one. It is
                the reward of every model without its own.
            model_rewards: Rewards of single models, by name (e.g. a proposer and a
                solver scored differently); each trains only its own model.

        Raises:
            FailedPreconditionError: The episode has no reward (reason
                ``REWARD_MISSING``) or is no longer open (``EPISODE_NOT_OPEN``).
        """
        request = episode_pb2.EndEpisodeRequest(
            episode_id=self._id, request_id=new_request_id(), model_rewards=dict(model_rewards or {})
        )
        if reward is not None:
            request.reward = reward
        response = await self._transport.unary(
            "EndEpisode", lambda s: s.episodes.EndEpisode, request, retryable=True
        )
        self._state = "ended"
        return _convert.episode_from_proto(response.episode)

    async def abort(self, reason: str = "") -> EpisodeInfo:
        """Aborts the episode: its calls are kept for inspection but never trained."""
        request = episode_pb2.AbortEpisodeRequest(
            episode_id=self._id, reason=reason, request_id=new_request_id()
        )
        response = await self._transport.unary(
            "AbortEpisode", lambda s: s.episodes.AbortEpisode, request, retryable=True
        )
        self._state = "aborted"
        return _convert.episode_from_proto(response.episode)

    async def _finish(self, exc: BaseException | None) -> None:
        """What leaving an ``episode(...)`` block does; the one policy for sync and async.

        After an exception the episode is aborted (failures to abort are logged, so the
        original exception is the one raised). After a normal exit it is ended unless
        it already was; with no reward the server refuses (REWARD_MISSING), and the
        episode is then aborted and the refusal raised.
        """
        if self._state != "open":
            return
        if exc is not None:
            try:
                await self.abort(reason=f"{type(exc).__name__}: {exc}"[:1000])
            except SwarmError as abort_err:
                _log.warning("abort failed", episode_id=self._id, error=str(abort_err))
            return
        try:
            await self.end()
        except FailedPreconditionError as err:
            if err.reason == "REWARD_MISSING":
                try:
                    await self.abort(reason="the episode ended without a reward")
                except SwarmError as abort_err:
                    _log.warning("abort failed", episode_id=self._id, error=str(abort_err))
            raise


MAX_REISSUES = 8
"""How often a non-streaming call whose stream broke is re-issued (each re-issue also
waits out a restarting server under the client's retry policy)."""


async def _complete_whole(stream: AsyncCompletionStream) -> Completion:
    """Reads a completion whole; a stream that breaks mid-way is re-issued whole with the
    same request_id: the server records only finished calls and answers a finished
    request_id with its record, so exactly one call is recorded."""
    for attempt in range(MAX_REISSUES + 1):
        try:
            async with stream:
                return await stream.get_final_completion()
        except StreamInterruptedError:
            if attempt == MAX_REISSUES or stream.transport_policy is None:
                raise
            stream = stream.reissued()
    raise AssertionError("unreachable")
