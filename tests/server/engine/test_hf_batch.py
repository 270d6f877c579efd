"""HFEngine's batch tensors (`engine.hf.batch`) and attention (`engine.hf.attention`):
rows joined into a running batch, trimmed when the longest leave, prefilled in length
buckets, and decoded with an in-place cache each see exactly what a forward pass of
their own context computes;
a call that arrives while a wave runs joins it; the GQA attention equals transformers'
`sdpa`."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.engine.base import GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.engine.hf.attention import use_gqa_sdpa
from swarmrl_server.engine.hf.batch import Batch, buckets
from swarmrl_server.engine.hf.engine import HFEngine
from swarmrl_server.models import load_model


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path) -> Any:
    model, tok = load_model(tiny_model_dir)
    return model.eval(), tok


@dataclasses.dataclass
class Ctx:
    """A row as `Batch` sees it: its context."""

    ids: list[int]

    def context(self) -> list[int]:
        return self.ids


def no_kwargs(rows: list[Any]) -> dict[str, Any]:
    return {}


def last_logits(model: Any, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0, -1].float()


def test_buckets_group_similar_lengths_within_the_waste() -> None:
    lengths = [6, 1030, 6, 500, 520, 6, 90, 1000]
    groups = buckets(lengths, waste=0.25)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        longest = lengths[g[0]]
        assert longest == max(lengths[i] for i in g)
        assert longest * len(g) <= 1.25 * sum(lengths[i] for i in g)
    assert [0, 2, 5] in [sorted(g) for g in groups]  # equal lengths share a group
    assert len(buckets([7] * 32)) == 1
    assert len(groups) < len(lengths)


@torch.inference_mode()
def test_joined_trimmed_and_bucketed_rows_each_see_their_own_context(tiny) -> None:
    model, _ = tiny
    gen = torch.Generator().manual_seed(0)
    contexts = [torch.randint(3, 200, (n,), generator=gen).tolist() for n in (40, 5, 38, 12)]
    rows = [Ctx(c) for c in contexts]
    # Rows 0-2 prefilled in buckets (40 and 38 together, 5 apart), row 3 joins later.
    batch = Batch.prefill(model, rows[:3], 0, no_kwargs)
    assert sorted(len(r.ids) for r in batch.rows) == [5, 38, 40] and batch.width == 40
    for r, logits_V in zip(batch.rows, batch.logits_B_V):
        assert (logits_V - last_logits(model, r.ids)).abs().max() <= 1e-5

    def step(batch: Batch) -> None:
        tokens = [int(x) for x in batch.logits_B_V.argmax(-1)]
        for r, t in zip(batch.rows, tokens):
            r.ids = r.ids + [t]
        batch.decode(model, torch.tensor(tokens), {})

    step(batch)
    batch.join(Batch.prefill(model, [rows[3]], 0, no_kwargs))
    step(batch)
    assert batch.width == 42
    for r, logits_V in zip(batch.rows, batch.logits_B_V):
        assert (logits_V - last_logits(model, r.ids)).abs().max() <= 1e-5, len(r.ids)
    # The two long rows leave: the columns only they used go too.
    batch.select([i for i, r in enumerate(batch.rows) if len(r.ids) < 20])
    assert batch.width == max(len(r.ids) for r in batch.rows) == 13
    for _ in range(80):  # appends in place, past the cache's first spare room
        step(batch)
    assert batch.width == 93
    for r, logits_V in zip(batch.rows, batch.logits_B_V):
        assert (logits_V - last_logits(model, r.ids)).abs().max() <= 1e-5, len(r.ids)


async def test_a_call_arriving_mid_wave_joins_it(tiny) -> None:
    model, tok = tiny
    engine = HFEngine("tiny", model, tok, max_model_len=2048)
    prompt = [5, 6, 7, 8, 9, 10]
    short = SamplingParams(temperature=1.0, max_tokens=12, seed=7)
    await engine.start()
    try:
        alone = [x async for x in engine.generate(prompt, short)][-1]
        long_call = engine.generate(prompt, SamplingParams(max_tokens=1500, seed=1))
        await anext(long_call)
        before = engine.stats
        joined = [x async for x in engine.generate(prompt, short)][-1]
        after = engine.stats
        assert after.admitted == before.admitted + 1 and after.waves == before.waves
        assert isinstance(await anext(long_call), GenerationChunk)  # still running
        await long_call.aclose()
    finally:
        await engine.stop()
    assert isinstance(joined, GenerationOutput) and isinstance(alone, GenerationOutput)
    assert joined.completion_ids == alone.completion_ids
    assert joined.logprobs == pytest.approx(alone.logprobs, abs=1e-5)


async def test_no_call_joins_a_wave_that_drains_for_a_weight_update(tiny) -> None:
    model, tok = tiny
    engine = HFEngine("tiny", model, tok, max_model_len=2048)
    await engine.start()
    try:
        long_call = engine.generate([5, 6, 7], SamplingParams(max_tokens=1500, seed=1))
        await anext(long_call)
        update = asyncio.create_task(engine.update_weights({}, policy_version=1))
        await asyncio.sleep(0.05)
        before = engine.stats.admitted
        waiting = asyncio.create_task(anext(engine.generate([5, 6], SamplingParams(seed=2))))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not update.done()
        assert engine.stats.admitted == before and engine.stats.waiting == 1
        await long_call.aclose()  # the wave ends: the update applies, then the call runs
        await update
        await waiting
    finally:
        await engine.stop()


def test_gqa_attention_equals_transformers_sdpa(tiny_model_dir: Path) -> None:
    plain, _ = load_model(tiny_model_dir)
    gqa, _ = load_model(tiny_model_dir)
    assert plain.config.num_key_value_heads < plain.config.num_attention_heads
    assert use_gqa_sdpa(gqa) and plain.config._attn_implementation == "sdpa"
    ids_B_T = torch.randint(3, 200, (3, 17), generator=torch.Generator().manual_seed(1))
    mask_B_T = torch.ones_like(ids_B_T)
    mask_B_T[0, :9] = 0  # left padding
    with torch.no_grad():
        want = plain(input_ids=ids_B_T, attention_mask=mask_B_T).logits
        got = gqa(input_ids=ids_B_T, attention_mask=mask_B_T).logits
    real = mask_B_T.bool()
    assert (got[real] - want[real]).abs().max() <= 1e-5
