"""Interruptible weight syncs on a real `vllm serve` (from .venv-vllm: the session's
servers, the LoRA one for LoRA):
the call in flight is stopped at the last token it streamed (its request aborted),
resubmitted as prompt + tokens after the reload, and returns as one call.

- full weights: exactly the tokens streamed, spans [v0, v1], each span's logprobs equal a
  plain forward at that span's weights (fp32, <= 1e-4);
- resumed on unchanged weights, a greedy call with a stop string that vLLM no longer
  sees (the resumed request's stop strings are applied here) gives the uninterrupted
  call's tokens, text and finish;
- LoRA: an interrupting adapter load moves the call to the new adapter (spans [1, 2],
  each with its adapter's logprobs).
Each test first pushes the weights it starts from (other tests, such as
tests/server/trainer/test_trainer_vllm.py, leave the session's server on trained weights),
and the tests that change the server's weights put the original ones back.

The sync surely lands mid-call: the call is held once it has streamed `HOLD_AT` tokens
(tests/vllm_support.py: the engine's reader sees a server pausing between two chunks),
the sync starts while it is held, and the hold lasts until the sync has landed. So the
sync stops the call at exactly the held token (its stream closed while held), and each
test asserts that it did: spans [v, v + 1] split at `Hold.passed`."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationOutput, SamplingParams
from swarmrl_server.engine.vllm.engine import VLLMEngine
from tests.engine_fixtures import random_adapters
from tests.interrupt_support import PROMPT, assert_spans_exact, run_call, versions
from tests.vllm_support import Hold, hold_calls

pytestmark = pytest.mark.slow
__all__ = ["versions"]  # the fixture, shared with test_interrupt
HOLD_AT = 3
"""Tokens a call streams before it is held (and the sync starts)."""
MAX_TOKENS = 100
SYNC_TIMEOUT_S = 60
"""How long a sync may take before the held call is released anyway (and the test fails)."""


async def held_call(engine: Engine, vllm: VLLMEngine, params: SamplingParams,
                    sync: Callable[[], Awaitable[None]]) -> tuple[Hold, GenerationOutput]:
    """Runs a call on `engine` (served by `vllm`'s server), holds it at `HOLD_AT` tokens,
    runs `sync()` (an interrupting update) while it is held, and releases it once the sync
    has landed. Checks the sync stopped the held call; returns the hold and the call."""
    hold = await hold_calls(vllm.servers[0], tokens=HOLD_AT)

    async def sync_while_held() -> None:
        await hold.wait_held()
        hold.log("sync")
        task = asyncio.ensure_future(sync())
        try:  # a sync that does not stop the call waits for it: release it after a while
            await asyncio.wait({task}, timeout=SYNC_TIMEOUT_S)
        finally:
            hold.release()  # (a no-op once the sync closed the held stream)
        await task
        hold.log("synced")

    _, out = await run_call(engine, PROMPT, params, sync=sync_while_held, after_tokens=HOLD_AT)
    assert "released" not in hold.names(), hold.names()
    hold.assert_order("held", "sync", "closed while held", "synced")
    assert vllm.last_sync is not None and vllm.last_sync.interrupted == 1
    return hold, out


async def test_vllm_interrupted_call_has_two_spans_with_exact_logprobs(
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path, versions: Any
) -> None:
    model, v0, v1 = versions
    engine = VLLMEngine("tiny", tiny_model_dir, urls=[vllm_url], trainable=True,
                        weights_dir=tmp_path / "w")
    await engine.start()
    try:
        await engine.update_weights(v0, 1)
        params = SamplingParams(temperature=0.7, max_tokens=MAX_TOKENS, seed=3)
        hold, out = await held_call(engine, engine, params,
                                    lambda: engine.update_weights(v1, 2, interrupt=True))
        assert out.spans() == [(1, 0, hold.passed), (2, hold.passed, len(out.completion_ids))]
        assert len(out.completion_ids) > hold.passed >= HOLD_AT
        assert engine.last_sync is not None and engine.last_sync.resume_s > 0
        assert_spans_exact(out, model, {1: v0, 2: v1}, 0.7)
        assert await engine.inflight() == 0  # the interrupted request is gone from vLLM
    finally:
        await engine.update_weights(v0, 100)  # the original weights back (a new version)
        await engine.stop()


async def test_vllm_resumed_on_the_same_weights_is_the_uninterrupted_call(
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path, versions: Any
) -> None:
    _, v0, v1 = versions
    engine = VLLMEngine("tiny", tiny_model_dir, urls=[vllm_url], trainable=True,
                        weights_dir=tmp_path / "w")
    await engine.start()
    try:
        await engine.update_weights(v1, 1)  # greedy on v0 repeats one word: no stop string
        _, whole = await run_call(engine, PROMPT,
                                  SamplingParams(temperature=0, max_tokens=MAX_TOKENS))
        assert len(whole.text) > 40, whole.text
        at, stop = first_new_string(whole.text)
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, stop=(stop,))
        _, plain = await run_call(engine, PROMPT, params)
        hold, resumed = await held_call(  # the sync lands before the stop string
            engine, engine, params, lambda: engine.update_weights(v1, 2, interrupt=True))
        assert plain.finish_reason == "stop" and plain.text == whole.text[:at]
        assert (resumed.completion_ids, resumed.text, resumed.finish_reason) == (
            plain.completion_ids, plain.text, plain.finish_reason)
        assert resumed.spans() == [(1, 0, hold.passed),
                                   (2, hold.passed, len(resumed.completion_ids))]
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
    vllm_url: str, tiny_model_dir: Path, tmp_path: Path
) -> None:
    from peft import set_peft_model_state_dict

    from swarmrl_server.engine.adapter import AdapterEngine, LoraSpec
    from swarmrl_server.trainer import lora

    model, tensors = random_adapters(tiny_model_dir, (1, 2))
    base = VLLMEngine("resumed", tiny_model_dir, urls=[vllm_url], trainable=True,
                      weights_dir=tmp_path / "w")
    view = AdapterEngine("resumed", base, LoraSpec(rank=8, alpha=16), shared=[])
    await view.start()
    try:
        await view.update_weights(tensors[0], 1)
        params = SamplingParams(temperature=0.7, max_tokens=MAX_TOKENS, seed=4)
        hold, out = await held_call(view, base, params,
                                    lambda: view.update_weights(tensors[1], 2, interrupt=True))
        assert out.spans() == [(1, 0, hold.passed), (2, hold.passed, len(out.completion_ids))]
        assert out.policy_version == 2
        for v, start, end in out.spans():
            set_peft_model_state_dict(model, tensors[v - 1],
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
