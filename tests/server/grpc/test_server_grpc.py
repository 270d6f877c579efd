"""The server over raw gRPC stubs: exact token capture and every error the contract names."""

from __future__ import annotations

import math
import uuid
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2

from swarmrl_proto.v1 import admin_service_pb2 as admin_pb
from swarmrl_proto.v1 import admin_service_pb2_grpc as admin_grpc
from swarmrl_proto.v1 import episode_service_pb2 as ep_pb
from swarmrl_proto.v1 import episode_service_pb2_grpc as ep_grpc
from swarmrl_proto.v1 import session_service_pb2 as s_pb
from swarmrl_proto.v1 import session_service_pb2_grpc as s_grpc
from swarmrl_proto.v1 import types_pb2 as t_pb
from tests.grpc_support import details
from tests.helpers import assert_eventually


class Stubs:
    def __init__(self, channel: grpc.aio.Channel) -> None:
        self.sessions = s_grpc.SessionServiceStub(channel)
        self.episodes = ep_grpc.EpisodeServiceStub(channel)
        self.admin = admin_grpc.AdminServiceStub(channel)
        self.session_id = ""

    async def open_session(self, lease_s: float = 30.0) -> str:
        self.session_id = uuid.uuid4().hex
        lease = duration_pb2.Duration()
        lease.FromNanoseconds(int(lease_s * 1e9))
        await self.sessions.OpenSession(
            s_pb.OpenSessionRequest(session_id=self.session_id, client_name="test", lease=lease)
        )
        return self.session_id

    async def start(self, **kw: Any) -> ep_pb.StartEpisodeResponse:
        kw.setdefault("task_id", "t1")
        return await self.episodes.StartEpisode(
            ep_pb.StartEpisodeRequest(session_id=self.session_id, **kw)
        )

    async def generate(self, request: ep_pb.GenerateRequest) -> tuple[list[ep_pb.GenerateChunk], ep_pb.GenerateResult]:
        chunks, result = [], None
        async for response in self.episodes.Generate(request):
            if response.HasField("chunk"):
                chunks.append(response.chunk)
            else:
                assert result is None, "exactly one result"
                result = response.result
        assert result is not None
        return chunks, result


def user(text: str) -> t_pb.ChatMessage:
    return t_pb.ChatMessage(role=t_pb.ROLE_USER, content=text)


@pytest.fixture
async def stubs(server: Any) -> Any:
    async with grpc.aio.insecure_channel(server.grpc_target) as channel:
        s = Stubs(channel)
        await s.open_session()
        yield s


async def test_full_episode_records_exact_token_ids(stubs: Stubs, server: Any) -> None:
    tokenizer = server.swarm.models["tiny"].tokenizer
    started = await stubs.start(task_id="task-a", group_id="g", agent_version="v1")
    messages = [t_pb.ChatMessage(role=t_pb.ROLE_SYSTEM, content="Be brief."), user("Hello there")]
    chunks, result = await stubs.generate(ep_pb.GenerateRequest(
        episode_id=started.episode_id, chat=ep_pb.ChatInput(messages=messages),
        sampling=t_pb.SamplingParams(max_tokens=12, seed=7),
    ))
    # The stream's chunks are exactly the completion, token for token.
    streamed = [t for c in chunks for t in c.token_ids]
    assert streamed == list(result.completion_ids)
    assert [lp for c in chunks for lp in c.logprobs] == pytest.approx(list(result.logprobs))
    assert "".join(c.text for c in chunks) == result.text
    assert len(result.logprobs) == len(result.completion_ids) > 0
    assert all(math.isfinite(lp) and lp <= 0 for lp in result.logprobs)
    # The prompt is the chat template rendered once, on the server.
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}],
        add_generation_prompt=True, tokenize=False,
    )
    assert list(result.prompt_ids) == tokenizer(rendered, add_special_tokens=False)["input_ids"]
    assert result.policy_version == 0
    # The store holds the very ids the engine returned (not a re-encoding of the text).
    got = await stubs.episodes.GetEpisode(
        ep_pb.GetEpisodeRequest(episode_id=started.episode_id, include_calls=True)
    )
    (call,) = got.episode.calls
    assert call.call_id == result.call_id
    assert list(call.prompt_ids) == list(result.prompt_ids)
    assert list(call.completion_ids) == list(result.completion_ids)
    assert list(call.logprobs) == pytest.approx(list(result.logprobs))
    ended = await stubs.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=started.episode_id, reward=1.0, request_id="end-1")
    )
    assert ended.episode.state == t_pb.EPISODE_STATE_ENDED
    assert ended.episode.reward == 1.0
    assert ended.episode.task_id == "task-a" and ended.episode.group_id == "g"


async def test_second_turn_extends_first_call_token_for_token(stubs: Stubs) -> None:
    started = await stubs.start()
    first_messages = [user("Name a color.")]
    _, first = await stubs.generate(ep_pb.GenerateRequest(
        episode_id=started.episode_id, chat=ep_pb.ChatInput(messages=first_messages),
        sampling=t_pb.SamplingParams(max_tokens=8, seed=1),
    ))
    follow_up = [*first_messages, first.message, user("Another one.")]
    _, second = await stubs.generate(ep_pb.GenerateRequest(
        episode_id=started.episode_id, chat=ep_pb.ChatInput(messages=follow_up),
        sampling=t_pb.SamplingParams(max_tokens=8, seed=2),
    ))
    head = list(first.prompt_ids) + list(first.completion_ids)
    assert list(second.prompt_ids[: len(head)]) == head
    got = await stubs.episodes.GetEpisode(
        ep_pb.GetEpisodeRequest(episode_id=started.episode_id, include_calls=True)
    )
    assert got.episode.calls[1].parent_call_id == first.call_id


async def test_token_input_and_generate_replay(stubs: Stubs) -> None:
    started = await stubs.start()
    request = ep_pb.GenerateRequest(
        episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[5, 6, 7, 8]),
        sampling=t_pb.SamplingParams(max_tokens=5, temperature=1.0), request_id="gen-1",
    )
    _, first = await stubs.generate(request)
    assert list(first.prompt_ids) == [5, 6, 7, 8]
    _, again = await stubs.generate(request)  # a retry: the recorded call, not a new one
    assert again.call_id == first.call_id
    assert list(again.completion_ids) == list(first.completion_ids)
    got = await stubs.episodes.GetEpisode(ep_pb.GetEpisodeRequest(episode_id=started.episode_id))
    assert got.episode.num_calls == 1


async def test_start_episode_is_idempotent_by_request_id(stubs: Stubs) -> None:
    a = await stubs.start(request_id="start-x")
    b = await stubs.start(request_id="start-x")
    assert a.episode_id == b.episode_id
    assert a.openai_api_key == b.openai_api_key


async def expect(code: grpc.StatusCode, call: Any) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    assert info.value.code() == code, info.value.details()
    return details(info.value)


async def expect_stream(code: grpc.StatusCode, stream: Any) -> tuple[str, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stream:
            pass
    assert info.value.code() == code, info.value.details()
    return details(info.value)


async def test_unknown_ids_are_not_found(stubs: Stubs) -> None:
    reason, _ = await expect(grpc.StatusCode.NOT_FOUND, stubs.start(models=["no-such-model"]))
    assert reason == "MODEL_NOT_FOUND"
    reason, _ = await expect(grpc.StatusCode.NOT_FOUND, stubs.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id="ep-missing", reward=1.0)))
    assert reason == "EPISODE_NOT_FOUND"
    reason, _ = await expect_stream(grpc.StatusCode.NOT_FOUND, stubs.episodes.Generate(
        ep_pb.GenerateRequest(episode_id="ep-missing", chat=ep_pb.ChatInput(messages=[user("x")]))))
    assert reason == "EPISODE_NOT_FOUND"
    started = await stubs.start()
    reason, _ = await expect_stream(grpc.StatusCode.NOT_FOUND, stubs.episodes.Generate(
        ep_pb.GenerateRequest(episode_id=started.episode_id, model="nope",
                              chat=ep_pb.ChatInput(messages=[user("x")]))))
    assert reason == "MODEL_NOT_FOUND"
    reason, _ = await expect(grpc.StatusCode.NOT_FOUND, stubs.episodes.StartEpisode(
        ep_pb.StartEpisodeRequest(session_id="never-opened", task_id="t")))
    assert reason == "SESSION_NOT_FOUND"


async def test_ending_twice_fails_but_replay_returns_first_answer(stubs: Stubs) -> None:
    started = await stubs.start()
    end = ep_pb.EndEpisodeRequest(episode_id=started.episode_id, reward=0.5, request_id="end-a")
    first = await stubs.episodes.EndEpisode(end)
    replay = await stubs.episodes.EndEpisode(end)
    assert replay.episode == first.episode
    reason, _ = await expect(grpc.StatusCode.FAILED_PRECONDITION, stubs.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=started.episode_id, reward=0.5, request_id="end-b")))
    assert reason == "EPISODE_NOT_OPEN"
    reason, _ = await expect(grpc.StatusCode.FAILED_PRECONDITION, stubs.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=started.episode_id, reward=0.5)))
    assert reason == "EPISODE_NOT_OPEN"


@pytest.mark.parametrize(
    ("request_kwargs", "field"),
    [
        ({"chat": ep_pb.ChatInput(messages=[])}, "input.chat.messages"),
        ({"chat": ep_pb.ChatInput(messages=[t_pb.ChatMessage(content="no role")])},
         "input.chat.messages[0].role"),
        ({"chat": ep_pb.ChatInput(messages=[t_pb.ChatMessage(role=t_pb.ROLE_TOOL, content="x")])},
         "input.chat.messages[0].tool_call_id"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1, 10**7, 3])}, "input.tokens.token_ids[1]"),
        ({"tokens": ep_pb.TokenInput(token_ids=[])}, "input.tokens.token_ids"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1] * 100_000)}, "input.tokens"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1, 2]),
          "sampling": t_pb.SamplingParams(max_tokens=-3)}, "sampling.max_tokens"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1, 2]),
          "sampling": t_pb.SamplingParams(max_tokens=10**6)}, "sampling.max_tokens"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1, 2]),
          "sampling": t_pb.SamplingParams(temperature=-1)}, "sampling.temperature"),
        ({"tokens": ep_pb.TokenInput(token_ids=[1, 2]),
          "sampling": t_pb.SamplingParams(top_p=0)}, "sampling.top_p"),
        ({}, "input"),
    ],
)
async def test_bad_generate_input_names_the_field(stubs: Stubs, request_kwargs: dict[str, Any], field: str) -> None:
    started = await stubs.start()
    reason, got_field = await expect_stream(grpc.StatusCode.INVALID_ARGUMENT, stubs.episodes.Generate(
        ep_pb.GenerateRequest(episode_id=started.episode_id, **request_kwargs)))
    assert (reason, got_field) == ("INVALID_FIELD", field)
    # Nothing was recorded, and the episode (and server) still work.
    _, result = await stubs.generate(ep_pb.GenerateRequest(
        episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[1, 2]),
        sampling=t_pb.SamplingParams(max_tokens=2)))
    got = await stubs.episodes.GetEpisode(ep_pb.GetEpisodeRequest(episode_id=started.episode_id))
    assert got.episode.num_calls == 1 and result.call_id


async def test_message_over_transport_limit_is_rejected_and_server_stays_up(stubs: Stubs) -> None:
    started = await stubs.start()
    huge = ep_pb.GenerateRequest(episode_id=started.episode_id,
                                 chat=ep_pb.ChatInput(messages=[user("x" * (17 * 1024 * 1024))]))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in stubs.episodes.Generate(huge):
            pass
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    status = await stubs.admin.GetStatus(admin_pb.GetStatusRequest())
    assert status.open_episodes == 1


async def test_rewards_must_be_finite_and_episode_stays_open(stubs: Stubs) -> None:
    started = await stubs.start()
    for bad in (float("nan"), float("inf"), float("-inf")):
        reason, field = await expect(grpc.StatusCode.INVALID_ARGUMENT, stubs.episodes.SubmitReward(
            ep_pb.SubmitRewardRequest(episode_id=started.episode_id, value=bad)))
        assert field == "value"
        _, field = await expect(grpc.StatusCode.INVALID_ARGUMENT, stubs.episodes.EndEpisode(
            ep_pb.EndEpisodeRequest(episode_id=started.episode_id, reward=bad)))
        assert field == "reward"
    reason, _ = await expect(grpc.StatusCode.FAILED_PRECONDITION, stubs.episodes.EndEpisode(
        ep_pb.EndEpisodeRequest(episode_id=started.episode_id)))
    assert reason == "REWARD_MISSING"
    await stubs.episodes.SubmitReward(ep_pb.SubmitRewardRequest(episode_id=started.episode_id, value=0.25))
    ended = await stubs.episodes.EndEpisode(ep_pb.EndEpisodeRequest(episode_id=started.episode_id))
    assert ended.episode.reward == 0.25


async def test_reward_for_aborted_episode_fails_precondition(stubs: Stubs) -> None:
    started = await stubs.start()
    aborted = await stubs.episodes.AbortEpisode(
        ep_pb.AbortEpisodeRequest(episode_id=started.episode_id, reason="agent crashed"))
    assert aborted.episode.state == t_pb.EPISODE_STATE_ABORTED
    assert aborted.episode.abort_reason == "agent crashed"
    reason, _ = await expect(grpc.StatusCode.FAILED_PRECONDITION, stubs.episodes.SubmitReward(
        ep_pb.SubmitRewardRequest(episode_id=started.episode_id, value=1.0)))
    assert reason == "EPISODE_NOT_OPEN"
    # Aborting again is harmless (idempotent).
    again = await stubs.episodes.AbortEpisode(ep_pb.AbortEpisodeRequest(episode_id=started.episode_id))
    assert again.episode.state == t_pb.EPISODE_STATE_ABORTED


async def test_expired_lease_aborts_open_episodes(stubs: Stubs) -> None:
    await stubs.open_session(lease_s=1.0)
    started = await stubs.start()

    async def aborted() -> None:
        got = await stubs.episodes.GetEpisode(ep_pb.GetEpisodeRequest(episode_id=started.episode_id))
        assert got.episode.state == t_pb.EPISODE_STATE_ABORTED
        assert got.episode.abort_reason == "lease expired"

    await assert_eventually(aborted, timeout=10)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await stubs.sessions.Heartbeat(s_pb.HeartbeatRequest(session_id=stubs.session_id))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND


async def test_events_are_sequenced_and_resumable(stubs: Stubs, server: Any) -> None:
    server.swarm.episodes.policy.pause_wait_s = 0  # refused at once, not waited out
    await stubs.admin.PauseGeneration(admin_pb.PauseGenerationRequest(reason="weight sync"))
    started = await stubs.start()
    reason, _ = await expect_stream(grpc.StatusCode.UNAVAILABLE, stubs.episodes.Generate(
        ep_pb.GenerateRequest(episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[1]))))
    assert reason == "GENERATION_PAUSED"
    await stubs.admin.ResumeGeneration(admin_pb.ResumeGenerationRequest())
    seen = []
    async for event in stubs.sessions.WatchEvents(s_pb.WatchEventsRequest(after_sequence=0)):
        seen.append(event)
        if len(seen) == 2:
            break
    assert seen[0].HasField("pausing") and seen[0].pausing.reason == "weight sync"
    assert seen[1].HasField("resumed")
    assert seen[0].sequence < seen[1].sequence
    async for event in stubs.sessions.WatchEvents(
        s_pb.WatchEventsRequest(after_sequence=seen[0].sequence)
    ):
        assert event.sequence == seen[1].sequence
        break


async def test_over_capacity_is_unavailable_with_retry_hint(stubs: Stubs, server: Any) -> None:
    server.swarm.episodes.policy.max_inflight = 1
    started = await stubs.start()
    running = stubs.episodes.Generate(ep_pb.GenerateRequest(
        episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[1, 2]),
        sampling=t_pb.SamplingParams(max_tokens=1500)))
    await running.read()  # the first chunk: one generation is running
    reason, _ = await expect_stream(grpc.StatusCode.UNAVAILABLE, stubs.episodes.Generate(
        ep_pb.GenerateRequest(episode_id=started.episode_id, tokens=ep_pb.TokenInput(token_ids=[1]))))
    assert reason == "OVER_CAPACITY"
    running.cancel()
    request = ep_pb.GenerateRequest(episode_id=started.episode_id,
                                    tokens=ep_pb.TokenInput(token_ids=[1]),
                                    sampling=t_pb.SamplingParams(max_tokens=2))

    async def admitted() -> None:
        try:
            await stubs.generate(request)
        except grpc.aio.AioRpcError as err:
            raise AssertionError(err.code()) from err

    await assert_eventually(admitted, timeout=10)


async def test_status_and_models(stubs: Stubs) -> None:
    models = await stubs.admin.ListModels(admin_pb.ListModelsRequest())
    (tiny,) = models.models
    assert tiny.name == "tiny" and tiny.vocab_size > 0 and tiny.max_model_len > 0
    status = await stubs.admin.GetStatus(admin_pb.GetStatusRequest())
    assert status.sessions == 1 and status.models[0].name == "tiny"
