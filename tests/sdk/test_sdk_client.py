"""The SDK against the in-process fake server: episodes, streams, tokens, errors, events."""

from __future__ import annotations

import asyncio
import math
import pickle
from collections.abc import AsyncIterator, Iterator
from typing import Any

import grpc
import pytest

import swarmrl
from swarmrl.testing import EOS_TOKEN_ID, FakeSwarmServer
from tests.helpers import assert_eventually

USER = [{"role": "user", "content": "What is 2+2?"}]
FAST = swarmrl.RetryPolicy(initial=0.01, maximum=0.05, timeout=5.0)


@pytest.fixture
async def server() -> AsyncIterator[FakeSwarmServer]:
    async with FakeSwarmServer(reply="The answer is 4.") as fake:
        yield fake


@pytest.fixture
async def client(server: FakeSwarmServer) -> AsyncIterator[swarmrl.AsyncSwarmClient]:
    config = swarmrl.ClientConfig(target=server.target, retry=FAST)
    async with swarmrl.AsyncSwarmClient(config=config) as c:
        yield c


@pytest.fixture
def threaded_server() -> Iterator[FakeSwarmServer]:
    with FakeSwarmServer(reply="The answer is 4.").run_in_thread() as fake:
        yield fake


# -- lifecycle ---------------------------------------------------------------------------


async def test_async_episode_lifecycle(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t1", agent_version="v1", labels={"k": "v"}) as ep:
        state_inside = ep.state
        assert ep.openai_base_url.endswith("/v1") and ep.openai_api_key
        assert [m.name for m in ep.models] == ["fake-model"]
        completion = await ep.chat(USER, top_logprobs=2)
        assert completion.text == "The answer is 4."
        assert completion.message == {"role": "assistant", "content": "The answer is 4."}
        assert completion.finish_reason == "stop"
        assert completion.completion_ids == [*b"The answer is 4.", EOS_TOKEN_ID]
        assert len(completion.logprobs) == len(completion.completion_ids)
        assert len(completion.top_logprobs) == len(completion.completion_ids)
        assert next(iter(completion.top_logprobs[0])) == completion.completion_ids[0]
        assert completion.usage.total_tokens == len(completion.prompt_ids) + 17
        assert await ep.reward(1.0) == 1.0
    assert (state_inside, ep.state) == ("open", "ended")

    info = await client.get_episode(ep.id, include_calls=True)
    assert (info.state, info.reward, info.task_id, info.group_id) == ("ended", 1.0, "t1", "t1")
    assert info.labels == {"k": "v"} and info.agent_version == "v1" and info.num_calls == 1
    assert info.start_time is not None and info.end_time is not None
    [call] = info.calls
    assert call.call_id == completion.call_id
    assert call.prompt_ids == completion.prompt_ids
    assert call.completion_ids == completion.completion_ids
    assert call.logprobs == completion.logprobs
    assert call.policy_version == completion.policy_version == 0
    assert (await client.get_episode(ep.id)).calls == []
    assert server.calls["OpenSession"] == 1 and server.calls["EndEpisode"] == 1


def test_sync_episode_lifecycle(threaded_server: FakeSwarmServer) -> None:
    with swarmrl.SwarmClient(threaded_server.target) as client:
        with client.episode(task_id="t1") as ep:
            completion = ep.chat(USER)
            ep.reward(0.5, call_id=completion.call_id)
            ep.reward(1.0)
        info = client.get_episode(ep.id, include_calls=True)
        assert info.state == "ended" and info.reward == 1.0
        assert info.calls[0].reward == 0.5
        assert [m.name for m in client.list_models()] == ["fake-model"]
        assert client.status().ended_episodes == 1
    assert threaded_server.calls["CloseSession"] == 1


def test_sync_client_is_shared_by_threads(threaded_server: FakeSwarmServer) -> None:
    import concurrent.futures

    def play(client: swarmrl.SwarmClient, i: int) -> str:
        with client.episode(task_id=f"t{i}") as ep:
            text = ep.chat(USER).text
            ep.reward(float(i))
        return text

    with swarmrl.SwarmClient(threaded_server.target) as client:
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            texts = list(pool.map(lambda i: play(client, i), range(8)))
        assert texts == ["The answer is 4."] * 8
        assert client.status().ended_episodes == 8


async def test_explicit_end_is_not_repeated_on_exit(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        info = await ep.end(reward=2.0)
        assert info.state == "ended" and info.reward == 2.0
    assert server.calls["EndEpisode"] == 1


async def test_start_episode_without_context_manager(client: swarmrl.AsyncSwarmClient) -> None:
    ep = await client.start_episode("t", group_id="g", models=["fake-model"])
    info = await ep.abort("changed my mind")
    assert (info.state, info.group_id, info.abort_reason) == ("aborted", "g", "changed my mind")


async def test_exception_inside_block_aborts_and_reraises(
    client: swarmrl.AsyncSwarmClient,
) -> None:
    with pytest.raises(ValueError, match="agent crashed"):
        async with client.episode(task_id="t") as ep:
            await ep.chat(USER)
            raise ValueError("agent crashed")
    info = await client.get_episode(ep.id)
    assert info.state == "aborted" and "ValueError: agent crashed" in info.abort_reason


def test_sync_exception_inside_block_aborts(threaded_server: FakeSwarmServer) -> None:
    with swarmrl.SwarmClient(threaded_server.target) as client:
        with pytest.raises(KeyError), client.episode(task_id="t") as ep:
            raise KeyError("x")
        assert client.get_episode(ep.id).state == "aborted"


async def test_auto_end_without_reward_raises_reward_missing(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    with pytest.raises(swarmrl.FailedPreconditionError) as caught:
        async with client.episode(task_id="t") as ep:
            await ep.chat(USER)
    assert caught.value.reason == "REWARD_MISSING"
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    # Nothing is left open behind the error.
    assert (await client.get_episode(ep.id)).state == "aborted"


# -- streaming and tokens ----------------------------------------------------------------


async def test_stream_yields_chunks_then_completion(client: swarmrl.AsyncSwarmClient) -> None:
    async with client.episode(task_id="t") as ep:
        async with ep.stream([{"role": "user", "content": "héllo"}]) as stream:
            with pytest.raises(RuntimeError, match="not finished"):
                _ = stream.completion
            chunks = [chunk async for chunk in stream]
        completion = stream.completion
        assert "".join(c.text for c in chunks) == completion.text == "The answer is 4."
        assert [t for c in chunks for t in c.token_ids] == completion.completion_ids
        assert [lp for c in chunks for lp in c.logprobs] == completion.logprobs
        assert await stream.get_final_completion() == completion
        await ep.reward(1.0)


def test_sync_stream(threaded_server: FakeSwarmServer) -> None:
    with swarmrl.SwarmClient(threaded_server.target) as client, client.episode("t") as ep:
        with ep.stream(USER) as stream:
            text = "".join(chunk.text for chunk in stream)
        assert text == stream.completion.text
        assert ep.stream(USER).get_final_completion().text == text
        ep.reward(0.0)


async def test_generate_tokens_uses_ids_as_given(client: swarmrl.AsyncSwarmClient) -> None:
    async with client.episode(task_id="t") as ep:
        prompt = [*b"count:"]
        completion = await ep.generate_tokens(prompt, max_tokens=3)
        assert completion.prompt_ids == prompt
        assert completion.completion_ids == [*b"The"]
        assert (completion.text, completion.finish_reason) == ("The", "length")
        stopped = await ep.generate_tokens(prompt, stop_token_ids=[ord(" ")])
        assert stopped.completion_ids == [*b"The "] and stopped.text == "The"
        by_string = await ep.chat(USER, stop=["answer"])
        assert (by_string.text, by_string.finish_reason) == ("The ", "stop")
        chunks = [chunk async for chunk in ep.stream_tokens(prompt, max_tokens=2)]
        assert [c.token_ids for c in chunks] == [[ord("T")], [ord("h")]]
        # The second call extends the first one's prompt + completion: it is its child.
        follow_up = await ep.generate_tokens(completion.prompt_ids + completion.completion_ids)
        await ep.reward(1.0)
    info = await client.get_episode(ep.id, include_calls=True)
    assert info.calls[-1].call_id == follow_up.call_id
    assert info.calls[-1].parent_call_id == completion.call_id


async def test_tool_calls_round_trip(client: swarmrl.AsyncSwarmClient) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "add",
                "description": "Adds two numbers.",
                "parameters": {"type": "object", "properties": {"a": {"type": "number"}}},
            },
        }
    ]
    async with client.episode(task_id="t") as ep:
        first = await ep.chat(USER, tools=tools)
        assert first.finish_reason == "tool_calls"
        [call] = first.tool_calls
        assert call["type"] == "function" and call["function"]["name"] == "add"
        messages = [
            *USER,
            first.message,
            {"role": "tool", "tool_call_id": call["id"], "content": "4"},
        ]
        second = await ep.chat(messages, tools=tools)
        assert second.finish_reason == "stop" and second.tool_calls == []
        await ep.reward(1.0)


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tokens": -1}, "sampling.max_tokens"),
        ({"top_p": 1.5}, "sampling.top_p"),
        ({"top_logprobs": 21}, "sampling.top_logprobs"),
    ],
)
async def test_bad_sampling_names_the_field(
    client: swarmrl.AsyncSwarmClient, kwargs: dict[str, float], field: str
) -> None:
    async with client.episode(task_id="t") as ep:
        with pytest.raises(swarmrl.InvalidArgumentError) as caught:
            await ep.chat(USER, **kwargs)  # type: ignore[arg-type]
        await ep.reward(0.0)
    err = caught.value
    assert (err.field, err.reason, err.code) == (
        field,
        "INVALID_FIELD",
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    assert err.domain == "swarmrl.dev" and field in str(err)
    assert isinstance(err.__cause__, grpc.RpcError)


async def test_errors_are_typed(client: swarmrl.AsyncSwarmClient) -> None:
    with pytest.raises(swarmrl.NotFoundError) as not_found:
        await client.get_episode("ep-nope")
    assert not_found.value.reason == "EPISODE_NOT_FOUND"
    assert not_found.value.metadata == {"episode_id": "ep-nope"}

    with pytest.raises(swarmrl.NotFoundError) as no_model:
        await client.start_episode("t", models=["gpt-17"])
    assert no_model.value.reason == "MODEL_NOT_FOUND"

    async with client.episode(task_id="t") as ep:
        with pytest.raises(swarmrl.InvalidArgumentError) as empty:
            await ep.chat([])
        assert empty.value.field == "chat.messages"
        with pytest.raises(swarmrl.InvalidArgumentError) as not_finite:
            await ep.reward(math.nan)
        assert not_finite.value.field == "value"
        with pytest.raises(swarmrl.NotFoundError) as no_call:
            await ep.reward(1.0, call_id="call-nope")
        assert no_call.value.reason == "CALL_NOT_FOUND"
        await ep.end(reward=1.0)
        with pytest.raises(swarmrl.FailedPreconditionError) as ended:
            await ep.chat(USER)
        assert ended.value.reason == "EPISODE_NOT_OPEN"
        with pytest.raises(swarmrl.FailedPreconditionError):
            await ep.end(reward=1.0)  # a new request_id: not a replay


async def test_malformed_messages_are_rejected_before_sending(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        cases: list[tuple[list[dict[str, Any]], str]] = [
            ([{"role": "wizard", "content": "hi"}], "chat.messages[0].role"),
            ([{"role": "user", "content": "hi", "audio": {"id": "x"}}], "chat.messages[0].audio"),
            ([{"role": "user", "content": [{"type": "image_url"}]}], "chat.messages[0].content[0]"),
        ]
        for messages, field in cases:
            with pytest.raises(swarmrl.InvalidArgumentError) as caught:
                ep.stream(messages)
            assert caught.value.field == field
        # Text parts and keys with empty values (as from `model_dump()`) are fine.
        parts = [{"role": "user", "content": [{"type": "text", "text": "hi"}], "refusal": None}]
        await ep.chat(parts)
        await ep.reward(1.0)
    assert server.calls["Generate"] == 1


async def test_api_key_is_sent_as_bearer_token() -> None:
    async with FakeSwarmServer(api_key="sekrit") as server:
        async with swarmrl.AsyncSwarmClient(server.target, api_key="sekrit") as client:
            await client.status()
        assert server.metadata["GetStatus"]["authorization"] == "Bearer sekrit"
        async with swarmrl.AsyncSwarmClient(server.target, api_key="wrong") as client:
            with pytest.raises(swarmrl.UnauthenticatedError):
                await client.list_models()


def test_errors_pickle_and_map_every_code() -> None:
    err = swarmrl.InvalidArgumentError("x: bad", reason="INVALID_FIELD", field="x", retry_delay=1.5)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is swarmrl.InvalidArgumentError
    assert (copy.field, copy.reason, copy.retry_delay, copy.message) == (
        "x",
        "INVALID_FIELD",
        1.5,
        "x: bad",
    )
    assert swarmrl.SwarmError("?", code=grpc.StatusCode.DATA_LOSS).code == grpc.StatusCode.DATA_LOSS
    for name in swarmrl.__all__:
        cls = getattr(swarmrl, name)
        if (
            isinstance(cls, type)
            and issubclass(cls, swarmrl.SwarmError)
            and cls is not swarmrl.SwarmError
        ):
            assert cls("m").code == cls.default_code != grpc.StatusCode.OK


# -- events ------------------------------------------------------------------------------


async def test_events_arrive_in_order(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.events() as events:
        server.set_policy_version("fake-model", 3)
        server.pause("weight sync")
        server.resume()
        received = [await events.__anext__() for _ in range(3)]
    assert received == [
        swarmrl.PolicyVersionChanged(sequence=1, model="fake-model", policy_version=3),
        swarmrl.Pausing(sequence=2, reason="weight sync"),
        swarmrl.Resumed(sequence=3, reason="weight sync"),
    ]
    assert events.last_sequence == 3
    async with client.episode(task_id="t") as ep:
        assert (await ep.chat(USER)).policy_version == 3
        await ep.reward(1.0)
    later = client.events(after_sequence=2)
    assert await later.__anext__() == swarmrl.Resumed(sequence=3, reason="weight sync")
    await later.aclose()


async def test_events_resume_after_a_dropped_stream(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    server.inject_failure("WatchEvents", after_messages=2)
    for version in (1, 2, 3, 4):
        server.set_policy_version("fake-model", version)
    events = client.events()
    received = [(await events.__anext__()).sequence for _ in range(4)]
    await events.aclose()
    assert received == [1, 2, 3, 4]  # none lost, none repeated
    assert server.calls["WatchEvents"] == 2


async def test_closing_ends_a_waiting_event_stream(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    events = client.events()
    waiting = asyncio.ensure_future(events.__anext__())
    await assert_eventually(lambda: _at_least(server.calls["WatchEvents"], 1))
    await events.aclose()
    with pytest.raises(StopAsyncIteration):
        await waiting
    # Closing the client ends the streams it still has open the same way.
    other = client.events()
    waiting = asyncio.ensure_future(other.__anext__())
    await assert_eventually(lambda: _at_least(server.calls["WatchEvents"], 2))
    await client.close()
    with pytest.raises(StopAsyncIteration):
        await waiting


async def test_closing_a_stream_early_cancels_the_generation(
    client: swarmrl.AsyncSwarmClient,
) -> None:
    async with client.episode(task_id="t") as ep:
        async with ep.stream(USER) as stream:
            first = await stream.__anext__()
        assert first.text == "T"
        assert [chunk async for chunk in stream] == []
        with pytest.raises(RuntimeError):
            _ = stream.completion
        await ep.reward(0.0)


def test_sync_events(threaded_server: FakeSwarmServer) -> None:
    with swarmrl.SwarmClient(threaded_server.target) as client:
        threaded_server.pause("sync")
        with client.events() as events:
            assert next(iter(events)) == swarmrl.Pausing(sequence=1, reason="sync")
        threaded_server.resume()


async def test_status_counts(server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient) -> None:
    ep = await client.start_episode("t")
    status = await client.status()
    assert (status.sessions, status.open_episodes, status.paused) == (1, 1, False)
    assert status.server_instance == server.instance
    await client.close()
    assert server.calls["CloseSession"] == 1
    # Closing the session aborted the episode it left open.
    async with swarmrl.AsyncSwarmClient(server.target) as other:
        assert (await other.get_episode(ep.id)).state == "aborted"


async def test_live_snapshot_of_the_fake(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    ep = await client.start_episode("t", agent_version="v1")
    await ep.chat([{"role": "user", "content": "Hi"}])
    server.pause("sync")
    live = await client.live_snapshot()
    assert live["server_instance"] == server.instance and live["paused"] == "sync"
    assert live["episodes"] == {"open": 1, "ended": 0.0, "aborted": 0.0}
    assert [(e["episode_id"], e["calls"], e["agent_version"]) for e in live["open_episodes"]] \
        == [(ep.id, 1, "v1")]
    assert [m["name"] for m in live["models"]] == ["fake-model"]


def _at_least(value: int, bound: int) -> None:
    assert value >= bound


async def test_one_sampling_object_with_keyword_overrides(client: swarmrl.AsyncSwarmClient) -> None:
    short = swarmrl.SamplingParams(max_tokens=3, temperature=0.0)
    async with client.episode(task_id="t") as ep:
        assert len((await ep.chat(USER, sampling=short)).completion_ids) == 3
        assert len((await ep.chat(USER, sampling=short, max_tokens=5)).completion_ids) == 5
        assert len((await ep.generate_tokens([1, 2], max_tokens=2)).completion_ids) == 2
        with pytest.raises(TypeError, match="max_token"):
            await ep.chat(USER, max_token=4)  # type: ignore[call-arg]
        await ep.reward(0.0)
    assert short.with_options({}) is short


async def test_fake_server_keeps_per_model_rewards() -> None:
    async with FakeSwarmServer(models=("proposer", "solver")) as fake, swarmrl.AsyncSwarmClient(
        fake.target
    ) as client:
        ep = await client.start_episode("t", models=["proposer", "solver"])
        await ep.reward(1.0, model="proposer")
        with pytest.raises(swarmrl.InvalidArgumentError) as err:
            await ep.end(0.5, model_rewards={"judge": 1.0})
        assert err.value.field == "model_rewards['judge']"
        info = await ep.end(0.5, model_rewards={"solver": 0.0})
        assert info.reward == 0.5 and info.model_rewards == {"proposer": 1.0, "solver": 0.0}
