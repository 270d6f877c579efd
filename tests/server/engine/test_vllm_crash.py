"""A launched `vllm serve` (the real one, from .venv-vllm) killed mid-call: the call in
flight fails with UNAVAILABLE (retryable; engine/vllm/engine.py's docstring, "A launched server
that dies"), the server is restarted, gets the latest synced weights AND the latest adapter
back before it serves again, and then serves exactly those (logprobs equal a transformers
recompute to 1e-4).

One server covers both restores: it serves LoRA (`--enable-lora`) and its base is trainable,
so a full-weight sync and an adapter load are both pending when it dies. (They were two
tests, one launch pair each; a launch costs ~30 CPU-s, so sharing one pair saves a minute of
the vLLM worker's time and drops nothing: each restore is checked against its own
recompute.) The test launches its server twice (start and restart), ~1-2 min on CPU."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.engine.vllm.engine import VLLMEngine
from swarmrl_server.engine.vllm.server import LaunchedServer
from swarmrl_server.errors import Code, SwarmError
from tests.engine_fixtures import LONG_CONTEXT, VLLM_PYTHON, random_adapters
from tests.helpers import assert_eventually
from tests.vllm_support import hold_calls

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(600)]  # two launches
PROMPT = [5, 6, 7, 8, 9, 10]
LONG = LONG_CONTEXT - len(PROMPT)
"""The killed call's max_tokens: it is still running when the kill lands (LONG_CONTEXT)."""


async def test_a_killed_vllm_serve_restarts_with_the_latest_weights_and_adapter(
    tiny_model_dir: Path, tmp_path: Path
) -> None:
    from swarmrl_server.engine.adapter import AdapterEngine, LoraSlots, LoraSpec

    base = VLLMEngine("tiny", tiny_model_dir, python=VLLM_PYTHON, log_dir=tmp_path,
                      weights_dir=tmp_path / "weights", max_model_len=LONG_CONTEXT, trainable=True,
                      lora=LoraSlots(adapters=1, max_rank=8))
    view = AdapterEngine("m", base, LoraSpec(rank=8, alpha=16), shared=[])
    from swarmrl_server.models import load_model

    # The reference: the base's weights moved (the base's version 3), wrapped in adapter
    # version 3. The wrapping keeps the base's tensors and a draw changes only lora_B, so
    # `state` stays the moved base's.
    plain, _ = load_model(tiny_model_dir)
    torch.manual_seed(0)
    plain.load_state_dict({k: v + 0.02 * torch.randn_like(v) for k, v in plain.state_dict().items()})
    state = plain.state_dict()  # after the load: tied weights hold one value
    model, (adapter,) = random_adapters(tiny_model_dir, (0,), base=plain)
    await view.start()
    try:
        server = base.servers[0]
        assert isinstance(server, LaunchedServer)
        await base.update_weights(state, 3)
        await view.update_weights(adapter, 3)
        await served_exactly(base, model, adapter=False)
        first = server.proc
        assert first is not None
        err = await killed_in_flight(server, view.generate(PROMPT, SamplingParams(
            temperature=1.0, max_tokens=LONG, seed=1, stop_token_ids=())))
        assert err.code == Code.UNAVAILABLE and err.retry_after_s

        def restarted() -> None:
            assert server.restarts == 1 and server.proc is not first and server.ready.is_set()

        await assert_eventually(restarted, timeout=600, interval=0.5)
        assert await server.weight_version() == "3"
        # New calls wait for the restart, then run on version 3's weights: the base's, and
        # the adapter's on top of them (not the bare base).
        await served_exactly(base, model, adapter=False)
        out = await served_exactly(view, model, adapter=True)
        with model.disable_adapter():
            assert logprob_error(model, out) > 1e-3
    finally:
        await view.stop()
    assert server.proc is not None and server.proc.poll() is not None


async def killed_in_flight(server: LaunchedServer,
                           call: AsyncIterator[GenerationChunk | GenerationOutput]) -> SwarmError:
    """SIGKILLs `server` (its API server and engine core) while `call` is in flight on it;
    returns the error the call ends with.

    The call cannot end before the kill: the server is frozen first (vLLM's
    `/pause?mode=keep`: a request is queued and generates nothing until a resume, which
    never comes), then the call is sent, and the kill lands once the server has begun its
    response (tests/vllm_support.py's hold sees the stream open). (Killed after its first
    chunk instead, a call of ~1,000 tokens was once streamed to its end while a loaded
    machine kept the test from reading that chunk: it ended normally.) Without the kill
    the call never ends, and the test times out."""
    assert server.proc is not None
    hold = await hold_calls(server, tokens=1)  # only to see the stream open
    assert (await server.client.post("/pause", params={"mode": "keep"})).status_code == 200

    async def run() -> None:
        async for _ in call:
            pass

    task = asyncio.ensure_future(run())
    async with asyncio.timeout(60):
        await hold.opened.wait()
    assert not task.done() and hold.passed == 0
    os.killpg(server.proc.pid, signal.SIGKILL)  # the API server and its engine core
    with pytest.raises(SwarmError) as err:
        await task
    hold.release()
    return err.value


async def served_exactly(engine: Engine, model: torch.nn.Module, *, adapter: bool
                         ) -> GenerationOutput:
    """A call runs on version 3, with logprobs equal to `model`'s recompute (fp32), with
    its adapter or without."""
    out = None
    async for item in engine.generate(PROMPT, SamplingParams(temperature=0.7, max_tokens=12,
                                                             seed=11)):
        out = item
    assert isinstance(out, GenerationOutput) and out.policy_version == 3 and out.completion_ids
    if adapter:
        assert logprob_error(model, out) <= 1e-4
    else:
        with model.disable_adapter():
            assert logprob_error(model, out) <= 1e-4
    return out


def logprob_error(model: torch.nn.Module, out: GenerationOutput) -> float:
    """Largest |served - recomputed| logprob of `out`'s tokens under `model` (T = 0.7)."""
    with torch.no_grad():
        logits_T_V = model(torch.tensor([PROMPT + out.completion_ids])).logits[
            0, len(PROMPT) - 1 : -1].float()
    ref_T = torch.log_softmax(logits_T_V / 0.7, -1).gather(
        1, torch.tensor(out.completion_ids)[:, None])[:, 0]
    return torch.tensor(out.logprobs).sub(ref_T).abs().max().item()
