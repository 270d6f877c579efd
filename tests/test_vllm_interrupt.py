"""Interruptible weight syncs on a real `vllm serve` (this module's own, from .venv-vllm):
the call in flight is stopped at the last token it streamed (its request aborted),
resubmitted as prompt + tokens after the reload, and returns as one call.

- full weights: exactly the tokens streamed, spans [v0, v1], each span's logprobs equal a
  plain forward at that span's weights (fp32, <= 1e-4);
- resumed on unchanged weights, a greedy call with a stop string that vLLM no longer
  sees (the resumed request's stop strings are applied here) gives the uninterrupted
  call's tokens, text and finish;
- LoRA: an interrupting adapter load moves the call to the new adapter (spans [1, 2],
  each with its adapter's logprobs).
The tests that change the server's weights put the original ones back.

The sync must land while the call runs. It is started once the call has streamed a few
tokens, but this process may read the stream seconds behind the server (a loaded
machine), and the sync first writes the weights, competing for the CPU. So the full-
calls are long (`LONG`: up to ~1,000 tokens, on servers with a `LONG_CONTEXT` context)
and run among `BALLAST` other calls that slow the server's steps (interrupted
too, and cancelled at the end); a call that still ended before its sync is tried again,
at most nine times."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationOutput, SamplingParams
from swarmrl_server.engine.vllm.engine import VLLMEngine
from tests.engine_fixtures import LONG_CONTEXT, launch_vllm, random_adapters
from tests.interrupt_support import PROMPT, assert_spans_exact, run_call, versions

pytestmark = pytest.mark.slow
__all__ = ["versions"]  # the fixture, shared with test_interrupt
LONG = LONG_CONTEXT - len(PROMPT)
BALLAST = 16
T = TypeVar("T")


@pytest.fixture(scope="module")
def own_vllm_url(tiny_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
                 ) -> Iterator[str]:
    """This module's own `vllm serve` of the tiny model, with a longer context than the
    session's (`vllm_url`): long calls (module docstring), and a server no other test has
    driven (on the session's server the first test failed after tests/test_trainer_vllm.py:
    a first span's logprobs off the base weights)."""
    yield from launch_vllm(tiny_model_dir, tmp_path_factory.mktemp("vllm-interrupt"),
                           max_model_len=LONG_CONTEXT)


@asynccontextmanager
async def ballast(engine: Engine) -> AsyncIterator[None]:
    """`BALLAST` long calls running meanwhile (see the module docstring)."""
    async def drain(seed: int) -> None:
        while True:  # one call after another until cancelled
            async for _ in engine.generate([20 + seed, 21, 22, 23], SamplingParams(
                    temperature=1.0, max_tokens=120)):
                pass

    tasks = [asyncio.create_task(drain(seed)) for seed in range(BALLAST)]
    try:
        yield
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def among_ballast(engine: Engine, call: Awaitable[T]) -> T:
    async with ballast(engine):
        await asyncio.sleep(0.3)  # the ballast is streaming
        return await call


async def interrupted_call(engine: Engine, params: SamplingParams,
                           sync: Callable[[int], Awaitable[None]],
                           reset: Callable[[int], Awaitable[None]], first: int
                           ) -> tuple[int, GenerationOutput]:
    """Runs a call among the ballast and, once it streams, `sync(version)` (an interrupting
    update), until the sync lands mid-call (two spans; at most 9 tries). A try whose call
    ended first is followed by `reset(version + 1)` (its weights back). Returns the
    sync's version and the call."""
    for version in range(first, first + 18, 2):
        _, out = await among_ballast(engine, run_call(
            engine, PROMPT, params, sync=lambda v=version: sync(v)))
        if len(out.spans()) == 2:
            return version, out
        await reset(version + 1)
    raise AssertionError("no sync landed mid-call in 9 tries")


async def test_vllm_interrupted_call_has_two_spans_with_exact_logprobs(
    own_vllm_url: str, tiny_model_dir: Path, tmp_path: Path, versions: Any
) -> None:
    model, v0, v1 = versions
    engine = VLLMEngine("tiny", tiny_model_dir, urls=[own_vllm_url], trainable=True,
                        weights_dir=tmp_path / "w")
    await engine.start()
    try:
        params = SamplingParams(temperature=0.7, max_tokens=LONG, seed=3)
        version, out = await interrupted_call(
            engine, params, lambda v: engine.update_weights(v1, v, interrupt=True),
            lambda v: engine.update_weights(v0, v), first=1)
        (va, a0, a1), (vb, b0, b1) = out.spans()
        assert (va, a0, vb, b1) == (version - 1, 0, version, len(out.completion_ids))
        assert 3 <= a1 == b0 < b1
        assert engine.last_sync is not None and engine.last_sync.interrupted >= 1
        assert engine.last_sync.resume_s > 0
        assert_spans_exact(out, model, {version - 1: v0, version: v1}, 0.7)
        assert await engine.inflight() == 0  # the interrupted request is gone from vLLM
    finally:
        await engine.update_weights(v0, 100)  # the original weights back (a new version)
        await engine.stop()


async def test_vllm_resumed_on_the_same_weights_is_the_uninterrupted_call(
    own_vllm_url: str, tiny_model_dir: Path, tmp_path: Path, versions: Any
) -> None:
    _, v0, v1 = versions
    engine = VLLMEngine("tiny", tiny_model_dir, urls=[own_vllm_url], trainable=True,
                        weights_dir=tmp_path / "w")
    await engine.start()
    try:
        await engine.update_weights(v1, 1)  # greedy on v0 repeats one word: no stop string
        _, whole = await run_call(engine, PROMPT, SamplingParams(temperature=0, max_tokens=LONG))
        assert len(whole.text) > 40, whole.text
        at, stop = first_new_string(whole.text)
        params = SamplingParams(temperature=0, max_tokens=LONG, stop=(stop,))
        _, plain = await run_call(engine, PROMPT, params)
        version, resumed = await interrupted_call(  # the sync lands before the stop string
            engine, params, lambda v: engine.update_weights(v1, v, interrupt=True),
            lambda v: engine.update_weights(v1, v), first=2)
        assert plain.finish_reason == "stop" and plain.text == whole.text[:at]
        assert (resumed.completion_ids, resumed.text, resumed.finish_reason) == (
            plain.completion_ids, plain.text, plain.finish_reason)
        assert [v for v, _, _ in resumed.spans()] == [version - 1, version]
    finally:
        await engine.update_weights(v0, 100)  # the original weights back (a new version)
        await engine.stop()


def first_new_string(text: str) -> tuple[int, str]:
    """The first place in `text`'s second half where a string of 3-8 characters occurs for
    the first time (a stop string that ends the call there), and that string."""
    for at in range(len(text) // 2, len(text) - 8):
        for n in range(3, 9):
            s = text[at:at + n]
            if text.find(s) == at and s.strip() and "\ufffd" not in s:
                return at, s
    raise AssertionError(f"no new string in the second half of {text!r}")


async def test_vllm_adapter_calls_resume_on_the_new_adapter(
    vllm_lora_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from peft import set_peft_model_state_dict

    from swarmrl_server.engine.adapter import AdapterEngine, LoraSpec
    from swarmrl_server.trainer import lora

    model, tensors = random_adapters(tiny_model_dir, (1, 2))
    base = VLLMEngine("resumed", tiny_model_dir, urls=[vllm_lora_url], trainable=True,
                      weights_dir=tmp_path / "w")
    view = AdapterEngine("resumed", base, LoraSpec(rank=8, alpha=16), shared=[])
    await view.start()
    try:
        await view.update_weights(tensors[0], 1)
        params = SamplingParams(temperature=0.7, max_tokens=LONG, seed=4)
        version, out = await interrupted_call(
            view, params, lambda v: view.update_weights(tensors[1], v, interrupt=True),
            lambda v: view.update_weights(tensors[0], v), first=2)
        assert [v for v, _, _ in out.spans()] == [version - 1, version]
        assert out.policy_version == version
        for v, start, end in out.spans():
            set_peft_model_state_dict(model, tensors[v - version + 1],
                                      adapter_name=lora.ADAPTER_NAME)
            with torch.no_grad():
                logits_T_V = model(input_ids=torch.tensor([PROMPT + out.completion_ids])).logits[
                    0, len(PROMPT) - 1 : -1].float()
            ref_T = torch.log_softmax(logits_T_V / 0.7, -1).gather(
                1, torch.tensor(out.completion_ids)[:, None])[:, 0]
            got_T = torch.tensor(out.logprobs[start:end])
            assert got_T.sub(ref_T[start:end]).abs().max().item() <= 1e-4
    finally:
        await view.stop()
