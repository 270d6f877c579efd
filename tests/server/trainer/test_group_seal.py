"""Groups are never split: a group with an episode still open is sealed, never planned
(partial_groups=train too), until its last open episode ends or is aborted.

The real-server tests make the race the seal guards against happen on purpose: all but
one of a group's episodes end, one RPC at a time, and the trainer plans over each as it
comes in (observed: it has taken them in, and in-process nothing runs between taking an
episode in and planning); nothing of the group may be trained or ready. Then the last one
ends (or is aborted) and the group trains in one step."""

from __future__ import annotations

from typing import Any

import swarmrl
from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.trainer.batching import Batcher, make_groups
from swarmrl_server.trainer.config import TrainerConfig
from tests.helpers import assert_eventually, wait_for_step
from tests.server_fixtures import ServerFactory
from tests.trainer_support import MODEL, make_episode

TRAIN = {"batch_rule": "episodes", "batch_size": "1", "group_size": "3",
         "partial_groups": "train", "lr": "1e-3", "checkpoint_every": "0",
         "checkpoint_on_stop": "false", "progress": "false"}


def ended(group_id: str, n: int, t0: float = 0.0) -> list[EpisodeRecord]:
    return [make_episode(f"{group_id}-{i}", float(i % 2), [], group_id=group_id,
                         end_time=t0 + i) for i in range(n)]


def test_a_partial_group_with_an_open_episode_is_sealed_even_when_partial_groups_train() -> None:
    b = Batcher(TrainerConfig.from_options({"batch_rule": "episodes", "batch_size": "1",
                                            "group_size": "3", "partial_groups": "train"}))
    pending = ended("a", 2)
    assert b.plan(pending, open_groups={("t", "a")}) is None and b.ready_episodes == 0
    assert b.plan(pending, open_groups={("t", "other")}) is not None  # only its own ids seal


def test_full_groups_are_never_sealed_and_group_size_zero_seals_the_whole_group() -> None:
    groups = make_groups(ended("a", 4), group_size=3, open_groups={("t", "a")})
    assert [(len(g.episodes), g.complete, g.sealed) for g in groups] == [
        (3, True, False), (1, False, True)]  # the open episode can only join the last
    (whole,) = make_groups(ended("a", 4), group_size=0, open_groups={("t", "a")})
    assert whole.sealed and len(whole.episodes) == 4


async def start_group(client: swarmrl.AsyncSwarmClient, group: str, n: int) -> list[Any]:
    episodes = []
    for _ in range(n):
        ep = await client.start_episode("t", group_id=group)
        await ep.chat([{"role": "user", "content": "hi"}], max_tokens=2)
        episodes.append(ep)
    return episodes


async def taken_in(trainer: Any, ids: set[str]) -> None:
    """Waits until the trainer's loop has taken every episode of `ids` in (pending, or
    trained already); in-process, it planned over them in the same step."""
    async def taken() -> None:
        consumed = await trainer.port.store.consumed_episodes(MODEL)
        pending = {r.episode_id for r in trainer.pending_records()}
        assert ids <= pending | set(consumed)
    await assert_eventually(taken, 30)


async def two_ended_one_open(client: swarmrl.AsyncSwarmClient, trainer: Any,
                             store: Any) -> list[Any]:
    """A group of 3 whose first two episodes end, one RPC at a time, with the trainer
    planning over each as it comes in: asserts nothing of the group was trained or made
    ready (the seal). Returns the group's episodes, the last still open."""
    first, second, last = await start_group(client, "g", 3)
    await first.end(1.0)
    await second.end(0.0)
    await taken_in(trainer, {first.id, second.id})
    # With partial_groups=train and batch_size=1, each ended episode is a batch,
    # unless the group is sealed by the one still open.
    assert await store.consumed_episodes(MODEL) == {}, "the group was split"
    assert trainer.batcher.ready_episodes == 0 and trainer.step == 0
    return [first, second, last]


async def test_a_group_ended_one_rpc_at_a_time_trains_whole(make_server: ServerFactory) -> None:
    running = await make_server(train=TRAIN)
    trainer = running.swarm.models[MODEL].trainer
    store = running.swarm.store
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        first, second, last = await two_ended_one_open(client, trainer, store)
        await last.end(1.0)
        await wait_for_step(trainer, 1)
        assert await store.consumed_episodes(MODEL) == {first.id: 1, second.id: 1, last.id: 1}


async def test_a_group_whose_last_open_episode_is_aborted_trains_what_ended(
        make_server: ServerFactory) -> None:
    running = await make_server(train=TRAIN)
    trainer = running.swarm.models[MODEL].trainer
    store = running.swarm.store
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        first, second, last = await two_ended_one_open(client, trainer, store)
        await last.abort("the environment failed")
        await wait_for_step(trainer, 1)  # the loop's next poll plans it: nothing is open
        assert await store.consumed_episodes(MODEL) == {first.id: 1, second.id: 1}


async def test_a_group_whose_client_went_away_trains_once_its_session_ends(
        make_server: ServerFactory) -> None:
    """The server aborts a session's open episodes when it ends (closed here; reaped when
    its lease lapses, by the same path): the group is no longer sealed."""
    running = await make_server(train=TRAIN)
    trainer = running.swarm.models[MODEL].trainer
    store = running.swarm.store
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        first, second, _ = await two_ended_one_open(client, trainer, store)
    await wait_for_step(trainer, 1)  # the session closed with the client: its episode aborted
    assert await store.consumed_episodes(MODEL) == {first.id: 1, second.id: 1}
