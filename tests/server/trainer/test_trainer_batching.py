"""When ended episodes make a batch: partial groups wait, dynamic sampling, declared done."""

from __future__ import annotations

from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.trainer.batching import Batcher, make_groups
from swarmrl_server.trainer.config import TrainerConfig
from tests.trainer_support import make_episode


def episodes(group_id: str, rewards: list[float], t0: float = 0.0, task_id: str = "t") -> list[EpisodeRecord]:
    return [make_episode(f"{group_id}-{i}", r, [], group_id=group_id, task_id=task_id,
                         end_time=t0 + i) for i, r in enumerate(rewards)]


def batcher(**options: str) -> Batcher:
    return Batcher(TrainerConfig.from_options(options))


def test_partial_groups_wait() -> None:
    b = batcher(batch_rule="groups", batch_size="2", group_size="4")
    pending = episodes("a", [1, 0, 1, 0]) + episodes("b", [1, 0, 0], t0=10)
    assert b.plan(pending) is None  # "b" has 3 of 4: not a batch of 2 complete groups
    pending.append(make_episode("b-3", 1.0, [], group_id="b", end_time=30))
    plan = b.plan(pending)
    assert plan is not None and [g.uid.split("/")[1] for g in plan.groups] == ["a", "b"]
    assert all(len(g.episodes) == 4 for g in plan.groups)


def test_partial_groups_train_when_configured() -> None:
    b = batcher(batch_rule="groups", batch_size="2", group_size="4", partial_groups="train")
    plan = b.plan(episodes("a", [1, 0]) + episodes("b", [0, 1, 1]))
    assert plan is not None and sorted(len(g.episodes) for g in plan.groups) == [2, 3]


def test_n_episodes_takes_whole_complete_groups_oldest_first() -> None:
    b = batcher(batch_rule="episodes", batch_size="6", group_size="4")
    pending = episodes("new", [1, 0, 1, 0], t0=100) + episodes("old", [0, 1, 1, 1]) + episodes("part", [1])
    assert b.plan(pending[:4]) is None  # 4 < 6
    plan = b.plan(pending)
    assert plan is not None
    assert [g.uid.split("/")[1] for g in plan.groups] == ["old", "new"]  # 8 >= 6, whole groups
    assert "part" not in {e.group_id for e in plan.episodes}


def test_a_shared_group_id_is_cut_into_groups_in_end_order() -> None:
    groups = make_groups(episodes("task", [1, 0, 1, 0, 1]), group_size=2)
    assert [len(g.episodes) for g in groups] == [2, 2, 1]
    assert [g.complete for g in groups] == [True, True, False]
    assert len({g.uid for g in groups}) == 3
    assert [len(g.episodes) for g in make_groups(episodes("task", [1, 0, 1]), group_size=0)] == [3]


def test_dynamic_sampling_counts_only_varied_groups_and_drops_uniform_ones() -> None:
    b = batcher(batch_rule="varied_groups", batch_size="2", group_size="3")
    pending = episodes("same", [1, 1, 1]) + episodes("v1", [1, 0, 1], t0=10) + episodes("zero", [0, 0, 0], t0=20)
    plan = b.plan(pending)
    assert plan is not None and plan.groups == []  # one varied group: not ready...
    assert {e.group_id for e in plan.dropped["uniform_rewards"]} == {"same", "zero"}  # ...but drops are
    pending = [e for e in pending if e.group_id == "v1"] + episodes("v2", [0, 0.5, 0], t0=30)
    plan = b.plan(pending)
    assert plan is not None and [g.uid.split("/")[1] for g in plan.groups] == ["v1", "v2"]
    assert not plan.dropped


def test_a_batch_is_ready_when_every_active_client_declared_done() -> None:
    b = batcher(batch_rule="clients", group_size="2")
    pending = episodes("a", [1, 0]) + episodes("b", [1])
    assert b.plan(pending, active_sessions={"s1", "s2"}) is None
    b.declare_done("s1")
    assert b.plan(pending, active_sessions={"s1", "s2"}) is None  # s2 still playing
    b.declare_done("s2")
    plan = b.plan(pending, active_sessions={"s1", "s2"})
    assert plan is not None and [g.uid.split("/")[1] for g in plan.groups] == ["a"]  # b waits
    assert b.declared == set()  # the next batch needs new declarations
    b.declare_done("s1")
    assert b.plan(episodes("c", [0, 1]), active_sessions={"s1"}) is not None  # s2 left


def test_no_clients_declared_means_no_batch() -> None:
    b = batcher(batch_rule="clients", group_size="0")
    assert b.plan(episodes("a", [1, 0]), active_sessions=set()) is None
