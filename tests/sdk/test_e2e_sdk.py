"""The Python SDK against the real server: exact tokens, concurrency, crash and restart."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from tests.helpers import ServerProcess, assert_eventually
from tests.server_fixtures import ServerFactory


async def test_episode_through_sdk_records_exact_token_ids(server: Any) -> None:
    tokenizer = server.swarm.models["tiny"].tokenizer
    async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:
        async with client.episode(task_id="sdk", agent_version="e2e") as ep:
            first = await ep.chat([{"role": "user", "content": "Hi!"}], max_tokens=10, seed=3)
            stream = ep.stream(
                [{"role": "user", "content": "Hi!"}, first.message,
                 {"role": "user", "content": "More."}],
                max_tokens=10, seed=4,
            )
            chunks = [chunk async for chunk in stream]
            second = stream.completion
            await ep.reward(0.75)
            episode_id = ep.id
        info = await client.get_episode(episode_id, include_calls=True)
    assert info.state == "ended" and info.reward == 0.75
    assert [c.call_id for c in info.calls] == [first.call_id, second.call_id]
    for recorded, returned in zip(info.calls, (first, second)):
        assert recorded.prompt_ids == returned.prompt_ids
        assert recorded.completion_ids == returned.completion_ids
        assert recorded.logprobs == pytest.approx(returned.logprobs)
    assert [t for c in chunks for t in c.token_ids] == second.completion_ids
    # Turn two starts with turn one's exact ids: what the model generated, never a
    # re-encoding of its text (which need not give the same ids).
    head = first.prompt_ids + first.completion_ids
    assert second.prompt_ids[: len(head)] == head
    assert info.calls[1].parent_call_id == first.call_id
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "Hi!"}],
                                             add_generation_prompt=True, tokenize=False)
    assert first.prompt_ids == tokenizer(rendered, add_special_tokens=False)["input_ids"]


async def test_32_concurrent_episodes_from_one_client(server: Any) -> None:
    async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:

        async def play(i: int) -> tuple[str, swarmrl.Completion]:
            async with client.episode(task_id=f"task-{i % 4}", group_id=f"g-{i % 4}") as ep:
                c = await ep.generate_tokens([5, 6, 7, i % 50 + 10], max_tokens=6, seed=i)
                await ep.reward(i / 32)
                return ep.id, c

        results = await asyncio.gather(*(play(i) for i in range(32)))
        assert len({episode_id for episode_id, _ in results}) == 32
        for i, (episode_id, completion) in enumerate(results):
            info = await client.get_episode(episode_id, include_calls=True)
            assert info.state == "ended" and info.reward == pytest.approx(i / 32)
            (call,) = info.calls
            assert call.prompt_ids == [5, 6, 7, i % 50 + 10]
            assert call.completion_ids == completion.completion_ids
    # They really shared the engine's decode steps rather than running one by one: one
    # at a time, every generated token would take a step of its own. (Calls either start
    # a wave together or join a running one, continuous batching; a loaded machine can
    # make the first wave a single call and admit the other 31 into it.)
    stats = server.swarm.models["tiny"].engine.stats
    assert stats.tokens_generated >= 32 and stats.steps <= stats.tokens_generated / 4, stats
    status = await server.swarm.status()
    assert status["ended_episodes"] == 32 and status["open_episodes"] == 0


@pytest.mark.slow
def test_sdk_survives_server_kill_and_restart(tmp_path: Path, model_cache: Path, tiny_model_dir: Path) -> None:
    """SIGKILL the server between episodes, start it again on the same port: the client's
    next episode succeeds with no error handling in user code."""
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache).start()
    ended: list[str] = []
    first_done = threading.Event()
    restarted = threading.Event()

    def agent() -> None:
        with swarmrl.SwarmClient(server.target) as client:
            for i in range(4):
                with client.episode(task_id=f"t{i}") as ep:
                    ep.chat([{"role": "user", "content": f"round {i}"}], max_tokens=5)
                    ep.reward(1.0)
                ended.append(ep.id)
                if i == 0:
                    first_done.set()
                    restarted.wait(120)  # the next episode starts against a dead server

    errors: list[BaseException] = []

    def run() -> None:
        try:
            agent()
        except BaseException as err:  # surfaced below
            errors.append(err)

    thread = threading.Thread(target=run)
    thread.start()
    try:
        assert first_done.wait(120)
        server.kill()
        restarted.set()  # the client now retries against a closed port...
        server.start()   # ...until the server is back on the same port
        thread.join(180)
        assert not thread.is_alive()
        assert not errors, errors
        assert len(ended) == 4
        with swarmrl.SwarmClient(server.target) as client:
            for episode_id in ended:
                info = client.get_episode(episode_id, include_calls=True)
                assert info.state == "ended" and info.calls[0].completion_ids
    finally:
        server.stop()


async def test_every_client_declaring_done_makes_a_training_batch(
    make_server: ServerFactory,
) -> None:
    """batch_rule=clients over the wire: the step waits for the last live session."""
    running = await make_server(
        train={"batch_rule": "clients", "group_size": "2", "progress": "false"})
    engine = running.swarm.models["tiny"].engine
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as a, \
            swarmrl.AsyncSwarmClient(running.grpc_target) as b:
        for client, reward in ((a, 1.0), (a, 0.0), (b, 0.5), (b, 0.25)):
            async with client.episode(task_id="t", group_id=f"g-{id(client)}") as ep:
                await ep.generate_tokens([5, 6, 7], max_tokens=4)
                await ep.reward(reward)
        await a.declare_done()
        await asyncio.sleep(0.5)  # a chance to train early, which must not happen
        assert engine.policy_version == 0
        await b.declare_done()
        await assert_eventually(lambda: _assert(engine.policy_version == 1), timeout=60)
        with pytest.raises(swarmrl.NotFoundError):
            await a.declare_done(model="no-such-model")


def _assert(condition: bool) -> None:
    assert condition
