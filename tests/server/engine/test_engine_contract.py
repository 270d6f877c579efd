"""One contract, every engine: what `engine/base.py` promises, checked against `hf`, `echo`
and `vllm` (a real `vllm serve` process from .venv-vllm on the tiny model).

Each engine is built once per module with a short context (`MAX_LEN`), so that "max_tokens
at the context limit" costs little; the vLLM engine attaches to the session's server.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.engine.echo import EchoEngine
from swarmrl_server.episodes.resolve import GenerationPolicy, SamplingRequest, resolve
from swarmrl_server.errors import SwarmError
from swarmrl_server.hosting import ModelHost
from swarmrl_server.models import load_model
from tests.engine_fixtures import MAX_LEN, make_engine

ENGINES = ["hf", "echo", pytest.param("vllm", marks=[pytest.mark.slow, pytest.mark.vllm])]
pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=ENGINES)
async def engine(request: pytest.FixtureRequest, tiny_model_dir: Path) -> AsyncIterator[Engine]:
    url = request.getfixturevalue("vllm_url") if request.param == "vllm" else ""
    eng = await make_engine(request.param, tiny_model_dir, url)
    try:
        yield eng
    finally:
        await eng.stop()


@pytest.fixture(scope="module")
def tiny(tiny_model_dir: Path):
    return load_model(tiny_model_dir)


@pytest.fixture(scope="module")
def prompt(tiny) -> list[int]:
    _, tok = tiny
    return tok.apply_chat_template(
        [{"role": "user", "content": "Name three animals that live in the cold north."}],
        add_generation_prompt=True, return_dict=True,
    )["input_ids"]


async def collect(
    engine: Engine, prompt: list[int], params: SamplingParams
) -> tuple[list[GenerationChunk], GenerationOutput]:
    """Runs one call; checks that the chunks add up to the output."""
    chunks: list[GenerationChunk] = []
    async for item in engine.generate(prompt, params):
        if isinstance(item, GenerationOutput):
            assert "".join(c.text for c in chunks) == item.text
            assert [t for c in chunks for t in c.token_ids] == item.completion_ids
            assert [lp for c in chunks for lp in c.logprobs] == pytest.approx(item.logprobs)
            assert len(item.logprobs) == len(item.completion_ids)
            return chunks, item
        chunks.append(item)
    raise AssertionError("no GenerationOutput")


def no_eos(engine: Engine, n: int) -> SamplingParams:
    """Greedy, and long enough to have something to cut (eos allowed: checked by callers)."""
    return SamplingParams(temperature=0, max_tokens=n)


async def test_streams_chunks_then_one_output(engine: Engine, prompt: list[int]) -> None:
    chunks, out = await collect(engine, prompt, SamplingParams(max_tokens=12, seed=1))
    assert len(chunks) >= 2 or len(out.completion_ids) <= 1  # streamed, not one lump
    assert out.prompt_ids == prompt
    assert out.policy_version == engine.policy_version
    assert out.finish_reason in ("stop", "length")
    if out.finish_reason == "length":
        assert len(out.completion_ids) == 12
    else:
        assert out.completion_ids[-1] in engine.eos_token_ids


async def test_stop_token_ends_the_call_and_is_recorded(engine: Engine, prompt: list[int]) -> None:
    _, free = await collect(engine, prompt, no_eos(engine, 10))
    ordinary = [t for t in free.completion_ids if t not in engine.eos_token_ids]
    assert len(ordinary) >= 3, free
    stop_id = ordinary[2]
    cut = free.completion_ids.index(stop_id) + 1
    params = SamplingParams(temperature=0, max_tokens=10, stop_token_ids=(stop_id,))
    _, out = await collect(engine, prompt, params)
    assert out.finish_reason == "stop"
    assert out.completion_ids == free.completion_ids[:cut]  # the stop token is recorded
    assert out.logprobs == pytest.approx(free.logprobs[:cut], abs=1e-5)
    assert stop_id not in [t for t in out.completion_ids[:-1]]


async def test_stop_string_cuts_the_text(engine: Engine, prompt: list[int], tiny) -> None:
    _, tok = tiny
    _, free = await collect(engine, prompt, no_eos(engine, 12))
    text = free.text
    assert len(text) >= 6, free
    stop = text[3:6]
    _, out = await collect(engine, prompt, SamplingParams(temperature=0, max_tokens=12, stop=(stop,)))
    assert out.finish_reason == "stop"
    assert out.text == text[: text.index(stop)]
    # Recorded ids are a prefix of the free run's and cover the stop string.
    n = len(out.completion_ids)
    assert out.completion_ids == free.completion_ids[:n]
    assert stop in tok.decode(out.completion_ids, skip_special_tokens=True)


async def test_seed_makes_sampling_reproducible(engine: Engine, prompt: list[int]) -> None:
    def params(seed: int) -> SamplingParams:
        return SamplingParams(temperature=1.0, max_tokens=10, seed=seed)

    (_, a), (_, b) = await asyncio.gather(collect(engine, prompt, params(7)),
                                          collect(engine, prompt, params(7)))
    assert a.completion_ids == b.completion_ids
    others = [(await collect(engine, prompt, params(s)))[1].completion_ids for s in (8, 9, 10)]
    assert any(o != a.completion_ids for o in others)


async def test_closing_the_stream_aborts_the_call(engine: Engine, prompt: list[int]) -> None:
    params = SamplingParams(temperature=1.0, max_tokens=MAX_LEN - len(prompt) - 1, seed=3)
    stream = engine.generate(prompt, params)
    first = await anext(stream)
    assert isinstance(first, GenerationChunk)
    await stream.aclose()
    # The engine forgets the call and keeps serving.
    _, out = await collect(engine, prompt, SamplingParams(temperature=0, max_tokens=3))
    assert len(out.completion_ids) >= 1
    inflight = getattr(engine, "inflight", None)
    if inflight is not None:
        assert await inflight() == 0


async def test_max_tokens_stops_at_the_context_limit(engine: Engine, prompt: list[int]) -> None:
    long_prompt = (prompt * MAX_LEN)[: MAX_LEN - 3]
    _, out = await collect(engine, long_prompt, SamplingParams(temperature=0, max_tokens=50))
    assert len(out.completion_ids) <= 3
    if len(out.completion_ids) < 3:
        assert out.finish_reason == "stop"
    else:
        assert out.finish_reason in ("length", "stop")
    with pytest.raises(SwarmError) as err:  # refused before it reaches the engine
        resolve(ModelHost("m", engine, "test"), GenerationPolicy(), SamplingRequest(max_tokens=1),
                token_ids=(prompt * MAX_LEN)[:MAX_LEN])
    assert err.value.field == "input"


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        ("prompt", "input.token_ids[3]"),
        ("stop_id", "sampling.stop_token_ids[0]"),
        ("top_p", "sampling.top_p"),
        ("temperature", "sampling.temperature"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(
    engine: Engine, prompt: list[int], bad: str, field: str
) -> None:
    """User input is checked once, by `resolve`, against the engine's vocabulary and
    context; the engine receives only resolved requests (and keeps serving)."""
    sampling, ids = SamplingRequest(max_tokens=2), prompt
    if bad == "prompt":
        ids = [*prompt[:3], engine.vocab_size]  # out of vocabulary
    elif bad == "stop_id":
        sampling = SamplingRequest(max_tokens=2, stop_token_ids=(engine.vocab_size + 5,))
    elif bad == "top_p":
        sampling = SamplingRequest(top_p=0.0)
    else:
        sampling = SamplingRequest(temperature=float("nan"))
    with pytest.raises(SwarmError) as err:
        resolve(ModelHost("m", engine, "test"), GenerationPolicy(), sampling, token_ids=ids)
    assert err.value.field == field
    _, out = await collect(engine, prompt[:5], SamplingParams(temperature=0, max_tokens=2))
    assert out.completion_ids


async def test_logprobs_equal_a_full_forward_at_t07(engine: Engine, prompt: list[int], tiny) -> None:
    """Recorded logprobs are those of the sampling distribution: log_softmax(logits / 0.7)
    of a full forward of the same weights (fp32). Echo has no weights: its distribution is
    uniform over its K candidates (see echo.py), which is what it must report instead."""
    model, _ = tiny
    _, out = await collect(engine, prompt, SamplingParams(temperature=0.7, max_tokens=16, seed=5))
    if isinstance(engine, EchoEngine):
        for step, (token, lp) in enumerate(zip(out.completion_ids, out.logprobs)):
            cands = engine._candidates(engine._pool(prompt), step) if step < engine.reply_tokens else [token]
            assert token in cands and lp == pytest.approx(-math.log(len(cands)), abs=1e-12)
        return
    ids_1_T = torch.tensor([prompt + out.completion_ids])
    with torch.no_grad():
        logits_T_V = model(ids_1_T).logits[0, len(prompt) - 1 : -1].float()
    ref_T = torch.log_softmax(logits_T_V / 0.7, dim=-1).gather(
        1, torch.tensor(out.completion_ids)[:, None]
    )[:, 0]
    assert torch.tensor(out.logprobs).sub(ref_T).abs().max().item() <= 1e-4



async def test_structural_tag_constrains_the_completion(engine: Engine, tiny) -> None:
    """A forced tool call (an xgrammar structural tag) comes back whole, parseable, ending
    the turn; vLLM gets it through its structured outputs."""
    import json

    from swarmrl_server.engine.grammar import tool_call_tag
    from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_reply

    _, tok = tiny
    prompt = tok("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                 add_special_tokens=False)["input_ids"]
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}},
              "required": ["city"], "additionalProperties": False}
    tag = tool_call_tag([("get_weather", schema)], TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    _, out = await collect(engine, prompt, SamplingParams(max_tokens=MAX_LEN - len(prompt),
                                                          seed=5, structural_tag=tag))
    assert out.finish_reason == "stop" and out.completion_ids[-1] in engine.eos_token_ids
    message, finish = parse_reply(out.text, out.finish_reason)
    assert finish == "tool_calls", out.text
    (call,) = message["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"])["city"] in ("Paris", "Lima")
