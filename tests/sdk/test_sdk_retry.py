"""The SDK's retry policy, reconnects and session recovery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import grpc
import pytest
from structlog.testing import capture_logs

import swarmrl
from swarmrl._retry import Budget, call_with_retry
from swarmrl.testing import FakeSwarmServer
from tests.helpers import assert_eventually

USER = [{"role": "user", "content": "hi"}]
FAST = swarmrl.RetryPolicy(initial=0.01, maximum=0.05, timeout=10.0)


@pytest.fixture
async def server() -> AsyncIterator[FakeSwarmServer]:
    async with FakeSwarmServer(reply="ok") as fake:
        yield fake


@pytest.fixture
async def client(server: FakeSwarmServer) -> AsyncIterator[swarmrl.AsyncSwarmClient]:
    config = swarmrl.ClientConfig(target=server.target, retry=FAST)
    async with swarmrl.AsyncSwarmClient(config=config) as c:
        yield c


class Flaky:
    """An attempt that fails with the given errors, then succeeds."""

    def __init__(self, *errors: swarmrl.SwarmError) -> None:
        self.errors = list(errors)
        self.attempts = 0

    async def __call__(self, budget: Budget | None) -> str:
        self.attempts += 1
        if self.errors:
            raise self.errors.pop(0)
        return "done"


# -- the policy --------------------------------------------------------------------------


async def test_unavailable_is_retried_for_safe_calls() -> None:
    flaky = Flaky(swarmrl.UnavailableError("down"), swarmrl.UnavailableError("down"))
    with capture_logs() as logs:
        assert await call_with_retry(flaky, policy=FAST, method="M", retryable=True) == "done"
    assert flaky.attempts == 3
    retries = [log for log in logs if log["event"] == "retrying"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(r["method"] == "M" and r["code"] == "UNAVAILABLE" for r in retries)
    assert all(0 <= r["delay"] <= FAST.maximum for r in retries)


async def test_unsafe_calls_are_never_retried() -> None:
    flaky = Flaky(swarmrl.UnavailableError("down"))
    with pytest.raises(swarmrl.UnavailableError):
        await call_with_retry(flaky, policy=FAST, method="M", retryable=False)
    assert flaky.attempts == 1


@pytest.mark.parametrize(
    "error",
    [
        swarmrl.InternalError("bug"),
        swarmrl.DeadlineExceededError("slow"),
        swarmrl.ResourceExhaustedError("full"),
        swarmrl.FailedPreconditionError("ended"),
    ],
)
async def test_only_unavailable_is_retried(error: swarmrl.SwarmError) -> None:
    flaky = Flaky(error)
    with pytest.raises(type(error)):
        await call_with_retry(flaky, policy=FAST, method="M", retryable=True)
    assert flaky.attempts == 1


async def test_retry_off_makes_one_attempt() -> None:
    flaky = Flaky(swarmrl.UnavailableError("down"))
    with pytest.raises(swarmrl.UnavailableError):
        await call_with_retry(flaky, policy=None, method="M", retryable=True)
    assert flaky.attempts == 1


async def test_retry_info_is_a_lower_bound_on_the_wait() -> None:
    flaky = Flaky(swarmrl.UnavailableError("paused", retry_delay=0.3))
    started = time.monotonic()
    with capture_logs() as logs:
        await call_with_retry(flaky, policy=FAST, method="M", retryable=True)
    assert time.monotonic() - started >= 0.3
    assert [log["delay"] for log in logs if log["event"] == "retrying"] == [0.3]


async def test_retries_stop_when_the_time_is_spent() -> None:
    policy = swarmrl.RetryPolicy(initial=0.01, maximum=0.05, timeout=0.3)
    flaky = Flaky(*[swarmrl.UnavailableError("down")] * 1000)
    started = time.monotonic()
    with pytest.raises(swarmrl.UnavailableError):
        await call_with_retry(flaky, policy=policy, method="M", retryable=True)
    assert 0.2 <= time.monotonic() - started < 2.0
    assert 3 <= flaky.attempts < 1000


async def test_time_spent_healthy_does_not_count() -> None:
    policy = swarmrl.RetryPolicy(initial=0.01, maximum=0.01, timeout=0.3)
    attempts = 0

    async def long_stream_then_lost(budget: Budget | None) -> str:
        nonlocal attempts
        attempts += 1
        if attempts == 1:
            await asyncio.sleep(0.4)  # models a stream that read happily for a while
            raise swarmrl.UnavailableError("server lost")
        return "reconnected"

    assert await call_with_retry(long_stream_then_lost, policy=policy, method="M", retryable=True)
    assert attempts == 2


def test_policy_validates() -> None:
    with pytest.raises(ValueError):
        swarmrl.RetryPolicy(timeout=0)
    with pytest.raises(ValueError):
        swarmrl.RetryPolicy(multiplier=0.5)


# -- the policy applied to calls ---------------------------------------------------------


async def test_generate_is_retried_before_the_first_message(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        server.inject_failure("Generate", times=2)
        completion = await ep.chat(USER)
        assert completion.text == "ok"
        await ep.reward(1.0)
    [first, *retries] = server.request_ids["Generate"]
    assert len(retries) == 2 and set(retries) == {first}  # one request_id, reused
    assert (await client.get_episode(ep.id)).num_calls == 1


async def test_generate_is_not_retried_after_the_first_message(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        server.inject_failure("Generate", after_messages=1)
        stream = ep.stream(USER)
        with pytest.raises(swarmrl.UnavailableError):
            async for _ in stream:
                pass
        await ep.reward(1.0)
    assert server.calls["Generate"] == 1


async def test_paused_generation_is_waited_out_honouring_retry_info(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        server.pause("weight sync", retry_delay=0.2)
        with capture_logs() as logs:
            chat = asyncio.create_task(ep.chat(USER))
            await assert_eventually(lambda: _at_least(server.calls["Generate"], 2))
            server.resume()
            completion = await chat
        assert completion.text == "ok"
        await ep.reward(1.0)
    retries = [log for log in logs if log["event"] == "retrying"]
    assert retries and all(r["reason"] == "GENERATION_PAUSED" for r in retries)
    assert all(r["delay"] >= 0.2 for r in retries)  # FAST alone would wait at most 0.05


async def test_mutating_calls_are_retried_with_their_request_id(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    server.inject_failure("StartEpisode")
    server.inject_failure("SubmitReward")
    server.inject_failure("EndEpisode")
    async with client.episode(task_id="t") as ep:
        await ep.reward(1.0)
    for method in ("StartEpisode", "SubmitReward", "EndEpisode"):
        ids = server.request_ids[method]
        assert len(ids) == 2 and ids[0] == ids[1], method
    status = await client.status()
    assert (status.open_episodes, status.ended_episodes) == (0, 1)  # applied once


async def test_a_retried_call_that_took_effect_gets_the_first_answer(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    # Each call is applied, then its answer is lost: the retry must not apply it twice.
    for method in ("StartEpisode", "SubmitReward", "EndEpisode"):
        server.inject_failure(method, after_messages=1)
    async with client.episode(task_id="t") as ep:
        assert await ep.reward(1.0) == 1.0
    assert ep.state == "ended"
    status = await client.status()
    assert (status.open_episodes, status.ended_episodes) == (0, 1)
    assert server.calls["StartEpisode"] == 2 and server.calls["EndEpisode"] == 2


async def test_other_codes_and_retry_off_fail_at_once(server: FakeSwarmServer) -> None:
    config = swarmrl.ClientConfig(target=server.target, retry=None)
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        server.inject_failure("GetStatus")
        with pytest.raises(swarmrl.UnavailableError):
            await client.status()
    async with swarmrl.AsyncSwarmClient(server.target) as client:
        server.inject_failure("GetStatus", code=grpc.StatusCode.INTERNAL, reason="BUG")
        with pytest.raises(swarmrl.InternalError) as caught:
            await client.status()
        assert caught.value.reason == "BUG"
    assert server.calls["GetStatus"] == 2


async def test_unreachable_server_gives_up_after_the_policy_timeout() -> None:
    config = swarmrl.ClientConfig(
        target="127.0.0.1:1", retry=swarmrl.RetryPolicy(initial=0.01, maximum=0.05, timeout=0.5)
    )
    started = time.monotonic()
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        with pytest.raises(swarmrl.UnavailableError):
            await client.status()
    assert time.monotonic() - started < 5.0


# -- reconnects and sessions -------------------------------------------------------------


async def test_a_restarted_server_is_waited_for() -> None:
    first = FakeSwarmServer(reply="first")
    await first.start()
    second = FakeSwarmServer(port=first.port, reply="second")
    config = swarmrl.ClientConfig(target=first.target, retry=FAST)
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        async with client.episode(task_id="t") as ep:
            assert (await ep.chat(USER)).text == "first"
            await ep.reward(1.0)
        await first.stop()

        async def restart_after_an_outage() -> None:
            await asyncio.sleep(0.5)  # the outage being simulated, not a synchronisation
            await second.start()

        restart = asyncio.create_task(restart_after_an_outage())
        try:
            # Between episodes the server went away; the next episode just works.
            async with client.episode(task_id="t") as ep:
                assert (await ep.chat(USER)).text == "second"
                await ep.reward(1.0)
        finally:
            await restart
        # The new server had never heard of the session: it was reopened, once.
        assert second.calls["OpenSession"] == 1
        assert (await client.status()).server_instance == second.instance
    await second.stop()


async def test_a_lost_session_is_reopened_and_the_call_repeated(
    server: FakeSwarmServer, client: swarmrl.AsyncSwarmClient
) -> None:
    async with client.episode(task_id="t") as ep:
        await ep.reward(1.0)
    server.drop_sessions()
    async with client.episode(task_id="t") as ep:
        await ep.reward(1.0)
    assert server.calls["OpenSession"] == 2
    assert server.calls["StartEpisode"] == 3  # the one that found no session, repeated


async def test_heartbeat_renews_reopens_and_only_logs_failures(server: FakeSwarmServer) -> None:
    config = swarmrl.ClientConfig(target=server.target, session_lease=1.0, retry=FAST)
    with capture_logs() as logs:
        async with swarmrl.AsyncSwarmClient(config=config) as client:
            ep = await client.start_episode("t")
            server.inject_failure("Heartbeat", times=1)
            await assert_eventually(lambda: _at_least(server.calls["Heartbeat"], 2))
            server.drop_sessions()
            await assert_eventually(lambda: _at_least(server.calls["OpenSession"], 2))
            await ep.end(reward=1.0)
    events = [log["event"] for log in logs]
    assert "heartbeat failed" in events and "session lost; reopening" in events


def _at_least(value: int, bound: int) -> None:
    assert value >= bound


async def test_events_survive_a_server_restart() -> None:
    first = FakeSwarmServer()
    await first.start()
    second = FakeSwarmServer(port=first.port)
    config = swarmrl.ClientConfig(target=first.target, retry=FAST)
    async with swarmrl.AsyncSwarmClient(config=config) as client:
        events = client.events()
        first.set_policy_version("fake-model", 1)
        assert (await events.__anext__()).sequence == 1
        waiting = asyncio.create_task(events.__anext__())
        await assert_eventually(lambda: _at_least(first.calls["WatchEvents"], 1))
        await first.stop()  # kills the open stream
        await second.start()
        second.set_policy_version("fake-model", 1)  # sequence 1: already seen, skipped
        second.set_policy_version("fake-model", 2)
        assert await waiting == swarmrl.PolicyVersionChanged(2, "fake-model", 2)
        await events.aclose()
    await second.stop()
