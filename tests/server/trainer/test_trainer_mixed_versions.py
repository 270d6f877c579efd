"""Training on calls resumed across a weight sync: their tokens come from several policy
versions (`CallRecord.version_spans`), each with the logprob recorded when it was sampled."""

from __future__ import annotations

import json
import math
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.observe.metrics import sync_metrics
from swarmrl_server.store.records import CallRecord
from swarmrl_server.swarm import Swarm
from swarmrl_server.timelines.merge import merge_calls
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.step import StepRunner, episode_rows
from tests.helpers import assert_eventually, wait_for_step
from tests.trainer_support import (
    MODEL,
    current_logprobs,
    group_of,
    insert_episodes,
    make_episode,
    multi_turn_calls,
    open_swarm,
    train,
)


def resumed(call: CallRecord, spans: list[tuple[int, int, int]]) -> CallRecord:
    """`call` as an engine records one resumed across syncs: `policy_version` is the last span's."""
    call.version_spans = spans
    call.policy_version = spans[-1][0]
    return call


def test_every_token_carries_the_version_of_its_span() -> None:
    calls = multi_turn_calls("e", random.Random(0), turns=2,
                             completions=[[700, 701, 702, 2], [810, 2]])
    resumed(calls[0], [(3, 0, 1), (4, 1, 3), (5, 3, 4)])
    calls[1].policy_version = 5  # an old-style record: no spans, one version
    (row,), _ = merge_calls(calls)
    generated = [v for v, m in zip(row.policy_versions, row.loss_mask) if m]
    assert generated == [3, 4, 4, 5, 5, 5]
    rows, _ = episode_rows(make_episode("e", 1.0, calls), MODEL, "g")
    assert rows.staleness(6) == 3  # the oldest span, not the version that finished the call


@pytest.mark.parametrize("spans", [[(3, 0, 2)], [(3, 0, 2), (4, 3, 4)], [(3, 0, 3), (4, 2, 4)]])
def test_spans_that_do_not_tile_the_completion_are_refused(spans: list[tuple[int, int, int]]) -> None:
    calls = multi_turn_calls("e", random.Random(0), turns=1, completions=[[700, 701, 702, 2]])
    with pytest.raises(ValueError, match="e-c0"):
        merge_calls([resumed(calls[0], spans)])


def test_the_loss_uses_each_tokens_recorded_logprob(tiny_model_dir: Path) -> None:
    """A PPO-clip step on two episodes of calls resumed across syncs, against the loss
    computed here by hand from each token's recorded logprob."""
    from swarmrl_server.models import load_model

    model, _ = load_model(tiny_model_dir)
    completions = [[700, 701, 702, 2], [810, 811, 812, 2]]
    episodes, calls_of = [], {}
    for k, reward in enumerate([1.0, 0.0]):
        calls = current_logprobs(model, multi_turn_calls(f"e{k}", random.Random(k), turns=2,
                                                       completions=completions))
        resumed(calls[0], [(0, 0, 2), (1, 2, 4)])
        resumed(calls[1], [(1, 0, 1), (2, 1, 4)])
        # Recorded logprobs off the current ones, per token (some ratios clip, some not):
        # what a sampler at other weights would have recorded.
        for i, c in enumerate(calls):
            c.logprobs = [lp - 0.4 * math.sin(1 + 7 * k + 3 * i + j) for j, lp in enumerate(c.logprobs)]
        calls_of[k] = calls
        episodes.append(episode_rows(make_episode(f"e{k}", reward, calls), MODEL, "g")[0])

    # By hand: the current logprob of each completion token (the model on the call's own
    # prompt + completion), GRPO's advantage, PPO's dual-clip loss, token-mean.
    rewards = [1.0, 0.0]
    mean = sum(rewards) / 2
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    eps, clip_c = 0.2, 3.0
    terms, clipped = [], 0
    with torch.no_grad():
        for k, calls in calls_of.items():
            advantage = (rewards[k] - mean) / (std + 1e-6)
            for c in calls:
                ids = torch.tensor([c.prompt_ids + c.completion_ids])
                logp = torch.log_softmax(model(input_ids=ids).logits[0].float(), -1)
                n = len(c.prompt_ids)
                for j, token in enumerate(c.completion_ids):
                    ratio = math.exp(float(logp[n - 1 + j, token]) - c.logprobs[j])
                    clipped += not 1 - eps <= ratio <= 1 + eps
                    loss = max(-advantage * ratio, -advantage * min(max(ratio, 1 - eps), 1 + eps))
                    if advantage < 0:
                        loss = min(loss, -advantage * clip_c)
                    terms.append(loss)
    assert clipped  # the offsets above do leave the trust region
    expected = sum(terms) / len(terms)

    config = TrainerConfig.from_options({"group_size": "0", "policy_loss": "vanilla",
                                         "loss_agg_mode": "token-mean", "clip_ratio": "0.2"})
    runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.0), config, pad_id=3)
    stats = runner.run(episodes)
    assert stats.tokens_trained == len(terms) == 16
    assert stats.loss == pytest.approx(expected, rel=1e-5, abs=1e-6)
    assert stats.verl["actor/pg_clipfrac"] > 0


def test_resumed_calls_and_their_tokens_are_counted() -> None:
    rng = random.Random(0)
    a = multi_turn_calls("a", rng, turns=2, completions=[[700, 701, 702, 2], [810, 2]])
    resumed(a[0], [(0, 0, 1), (1, 1, 4)])
    b = multi_turn_calls("b", rng, turns=3, split=True)  # three rows, one resumed call
    resumed(b[2], [(1, 0, 1), (2, 1, 2)])
    c = multi_turn_calls("c", rng, turns=1, completions=[[700, 701, 2]])
    resumed(c[0], [(2, 0, 3)])  # one span: not resumed
    rows = [r for calls in (a, b, c) for r in merge_calls(calls)[0]]
    assert sync_metrics(rows) == {"sync/resumed_calls": 2.0, "sync/resumed_tokens": 6.0}


# -- in a swarm: the staleness filter counts spans ----------------------------------------


@pytest.fixture
async def swarm(tmp_path: Path, tiny_model_dir: Path) -> AsyncIterator[Swarm]:
    s = await open_swarm(tmp_path / "data", tiny_model_dir)
    try:
        yield s
    finally:
        await s.stop()


def _resumed_group(prefix: str, oldest: int, newest: int, t0: float) -> list[Any]:
    """A group whose first calls began at `oldest` and were resumed at `newest`."""
    group = group_of(prefix, [1.0, 0.0], group_id=prefix, t0=t0, version=newest)
    for e in group:
        resumed(e.calls[0], [(oldest, 0, 1), (newest, 1, len(e.calls[0].completion_ids))])
    return group


async def test_an_episode_is_as_stale_as_its_oldest_span(swarm: Swarm) -> None:
    # Two steps bring the weights to version 2. Then g2's first calls began at version 0
    # and finished at 2: the newest tokens are fresh, the oldest too old for
    # max_staleness=1, so g2 is dropped as stale. g3's began at 1: trained, stale by 1.
    early = [group_of(f"g{k}-", [1.0, 0.0], group_id=f"g{k}", t0=10.0 * k, seed=k) for k in range(2)]
    await insert_episodes(swarm.store, [e for g in early for e in g])
    trainer = await train(swarm, max_staleness="1", checkpoint_every="0")
    await wait_for_step(trainer, 2)
    late = _resumed_group("g2-", 0, 2, t0=20) + _resumed_group("g3-", 1, 2, t0=30)
    await insert_episodes(swarm.store, late)
    for e in late:
        trainer.notify_episode_ended(e)
    await wait_for_step(trainer, 3)
    await assert_eventually(lambda: _assert(trainer.pending == 0))
    assert trainer.dropped_total["stale"] == 2
    consumed = await swarm.store.consumed_episodes(MODEL)
    assert {e: consumed[e] for e in ("g2-0", "g2-1", "g3-0", "g3-1")} == {
        "g2-0": 3, "g2-1": 3, "g3-0": 3, "g3-1": 3}
    lines = (swarm.data_dir / "metrics.jsonl").read_text().splitlines()  # type: ignore[operator]
    rows = [json.loads(line) for line in lines]
    assert [r["sync/resumed_calls"] for r in rows] == [0, 0, 2]
    last = rows[-1]
    assert last["drop/stale"] == 2 and last["stale/max"] == 1 and last["stale/hist_1"] == 2
    assert last["sync/resumed_tokens"] == 4  # two first calls of 2 tokens each


def _assert(condition: bool) -> None:
    assert condition
