"""Pauses are per model: one model's trainer falling behind pauses that model only.

Two trainable models share a swarm. The trainer of `tiny` has more ready episodes than
its max_pending and its step is blocked, so it falls behind and pauses `tiny`; `other`
keeps generating. Once the step runs and the trainer catches up, `tiny` generates again.
An admin pause still pauses every model, and its resume lifts only its own pause.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from swarmrl_server.config import ModelSpec, ServerConfig
from swarmrl_server.engine.hf.engine import HFEngine
from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest
from swarmrl_server.errors import Reason, SwarmError
from swarmrl_server.hosting import ModelHost
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.swarm import Swarm
from swarmrl_server.trainer.workers import LocalGroup
from swarmrl_server.wiring import attach_trainers
from tests.helpers import assert_eventually, wait_for_step
from tests.trainer_support import MODEL, group_of, insert_episodes

OTHER = "other"


@pytest.fixture
async def swarm(tmp_path: Path, tiny_model_dir: Path) -> AsyncIterator[Swarm]:
    hosts = {name: ModelHost(name, HFEngine.from_pretrained(name, tiny_model_dir), "tiny",
                             tiny_model_dir, trainable=True) for name in (MODEL, OTHER)}
    # These tests look at who holds which pause: a paused call is refused at once
    # (pause_wait_s=0) rather than waited out (tests/server/test_pause_wait.py).
    s = Swarm(hosts, data_dir=tmp_path / "data", policy=GenerationPolicy(pause_wait_s=0))
    await s.start()
    try:
        yield s
    finally:
        await s.stop()


async def generate(swarm: Swarm, episode_id: str, model: str) -> Any:
    """One call of `model` in the episode; returns its result."""
    items = [item async for item in swarm.episodes.generate(GenerateCall(
        episode_id, IN_PROCESS, model=model, token_ids=[1, 873, 198],
        sampling=SamplingRequest(max_tokens=2, temperature=1.0)))]
    return items[-1]


async def refused_as_paused(swarm: Swarm, episode_id: str, model: str) -> str:
    with pytest.raises(SwarmError) as info:
        await generate(swarm, episode_id, model)
    assert info.value.reason is Reason.GENERATION_PAUSED
    return str(info.value)


async def test_a_trainer_behind_pauses_only_its_own_model(
    swarm: Swarm, monkeypatch: pytest.MonkeyPatch
) -> None:
    entered, release = threading.Event(), threading.Event()
    step = LocalGroup.step

    def blocked_step(self: LocalGroup, episodes: Sequence[Any], advantages_E_L: Any) -> Any:
        entered.set()
        release.wait(timeout=120)  # the trainer's worker thread, not the event loop
        return step(self, episodes, advantages_E_L)

    monkeypatch.setattr(LocalGroup, "step", blocked_step)
    # Three groups wait for `tiny`'s trainer: more than its max_pending of 2.
    groups = [group_of(f"g{k}-", [1.0, 0.0], group_id=f"g{k}", t0=10.0 * k, seed=k)
              for k in range(3)]
    await insert_episodes(swarm.store, [e for g in groups for e in g])
    options = {"progress": "false", "group_size": "2", "batch_rule": "groups",
               "batch_size": "1", "lr": "1e-3", "max_staleness": "10",
               "checkpoint_every": "0", "checkpoint_on_stop": "false",
               f"{MODEL}.max_pending": "2"}
    config = ServerConfig(models=(ModelSpec(MODEL, "tiny"), ModelSpec(OTHER, "tiny")),
                          train=True, train_options=options, data_dir=swarm.data_dir)
    await swarm.sessions.open("s1", "test", 60.0, caller=IN_PROCESS)
    record, _ = await swarm.episodes.start(
        session_id="s1", task_id="t", group_id="", agent_version="", models=[MODEL, OTHER],
        request_id="", labels={}, caller=IN_PROCESS)
    try:
        await attach_trainers(swarm, config)
        trainer = swarm.models[MODEL].trainer
        await assert_eventually(lambda: _check(entered.is_set()), timeout=60)

        # `tiny`'s trainer is behind and its step blocked: `tiny` is paused, `other` is not.
        assert swarm.pauses.reason(OTHER) is None
        assert "trainer of tiny is behind" in (swarm.pauses.reason(MODEL) or "")
        assert "trainer of tiny is behind" in await refused_as_paused(swarm, record.episode_id, MODEL)
        result = await generate(swarm, record.episode_id, OTHER)
        assert result.call.model == OTHER and result.call.completion_ids

        release.set()
        await wait_for_step(trainer, 3, timeout=120)
        await assert_eventually(lambda: _check(swarm.pauses.reason(MODEL) is None))
        assert (await generate(swarm, record.episode_id, MODEL)).call.model == MODEL
        assert swarm.models[OTHER].trainer.step == 0  # nothing to train: never paused `other`
    finally:
        release.set()
    events = [(k, p.get("reason", "")) for _, k, p in await swarm.store.events_after(0)
              if k in ("pausing", "resumed")]
    assert events[0][0] == "pausing" and "tiny" in events[0][1] and events[-1][0] == "resumed"

    # The admin's pause holds every model; its resume lifts only the admin's own pause.
    await swarm.pause("maintenance")
    for model in (MODEL, OTHER):
        assert "maintenance" in await refused_as_paused(swarm, record.episode_id, model)
    await swarm.pauses.holder("trainer", MODEL).hold("trainer of tiny is behind")
    await swarm.resume()
    await refused_as_paused(swarm, record.episode_id, MODEL)
    assert (await generate(swarm, record.episode_id, OTHER)).call.model == OTHER
    await swarm.pauses.holder("trainer", MODEL).release()
    assert swarm.paused_reason is None
    await asyncio.gather(*(generate(swarm, record.episode_id, m) for m in (MODEL, OTHER)))


def _check(condition: bool) -> None:
    assert condition
