"""Interruptible weight syncs (`weight_sync=interrupt`) on the in-process engines and
through the server: a call in flight is stopped at a token, the weights change, and it
continues as one call whose `version_spans` say which version made which tokens.

- hf: the call returns exactly the tokens it streamed, in two spans [v0, v1], and each
  span's logprobs equal a plain forward of the model at that span's weights (fp32,
  <= 1e-4); resumed on unchanged weights, a seeded call with a stop string, and a
  grammar-constrained call, give exactly the tokens of the uninterrupted call; a plain
  (wait) sync leaves the call on one version; a LoRA adapter's calls resume too.
- echo: the same spans and tokens at a decode step.
- the server: a gRPC client streams one call, interrupted mid-way, and its final record
  (and the stored call) carries the two spans.

The engine's model is slowed by a forward hook (a test-side sleep per forward pass) so a
call is surely still running when the sync comes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.engine.base import SamplingParams
from swarmrl_server.engine.echo import EchoEngine
from swarmrl_server.engine.hf.engine import HFEngine
from tests.interrupt_support import PROMPT, assert_spans_exact, run_call, versions
from tests.store_support import stored_episode

__all__ = ["versions"]  # the fixture (tests/interrupt_support.py), found by pytest by name
STEP_S = 0.01
"""Seconds each forward pass of the engine's model is held up (see the module docstring)."""


@pytest.fixture
async def hf(tiny_model_dir: Path) -> AsyncIterator[HFEngine]:
    engine = HFEngine.from_pretrained("tiny", tiny_model_dir, max_model_len=512)
    handle = engine.model.register_forward_hook(lambda *_: time.sleep(STEP_S))
    await engine.start()
    try:
        yield engine
    finally:
        await engine.stop()
        handle.remove()


async def test_hf_interrupted_call_has_two_spans_with_exact_logprobs(
    hf: HFEngine, versions: Any
) -> None:
    model, v0, v1 = versions
    params = SamplingParams(temperature=0.7, max_tokens=60, seed=3)
    _, out = await run_call(hf, PROMPT, params,
                            sync=lambda: hf.update_weights(v1, 1, interrupt=True))
    (va, a0, a1), (vb, b0, b1) = out.spans()
    assert (va, a0, vb, b1) == (0, 0, 1, len(out.completion_ids)) and 3 <= a1 == b0 < b1
    assert hf.last_sync is not None and hf.last_sync.interrupted == 1
    assert hf.last_sync.resume_s > 0
    assert_spans_exact(out, model, {0: v0, 1: v1}, 0.7)


async def test_hf_wait_sync_leaves_the_call_on_its_version(hf: HFEngine, versions: Any) -> None:
    model, v0, v1 = versions
    params = SamplingParams(temperature=0.7, max_tokens=30, seed=3)
    _, out = await run_call(hf, PROMPT, params, sync=lambda: hf.update_weights(v1, 1))
    assert out.spans() == [(0, 0, len(out.completion_ids))]
    assert hf.policy_version == 1 and hf.last_sync is not None
    assert hf.last_sync.interrupted == 0
    assert_spans_exact(out, model, {0: v0}, 0.7)


async def test_hf_resumed_on_the_same_weights_is_the_uninterrupted_call(
    hf: HFEngine, tiny_model_dir: Path
) -> None:
    """Generator, text stream and stop strings carry over: a seeded call with a stop
    string gives the same tokens, text and finish whether or not a sync interrupted it."""
    state = {k: v.clone() for k, v in hf.model.state_dict().items()}
    free = SamplingParams(temperature=1.0, max_tokens=60, seed=11)
    _, whole = await run_call(hf, PROMPT, free)
    assert len(whole.text) > 20, whole.text
    # A stop string first met well after the interruption point.
    at = next(i for i in range(len(whole.text) // 2, len(whole.text) - 3)
              if whole.text.find(whole.text[i:i + 3]) == i and whole.text[i:i + 3].strip())
    params = SamplingParams(temperature=1.0, max_tokens=60, seed=11, stop=(whole.text[at:at + 3],))
    _, plain = await run_call(hf, PROMPT, params)
    _, resumed = await run_call(hf, PROMPT, params,
                                sync=lambda: hf.update_weights(state, 1, interrupt=True))
    assert plain.finish_reason == "stop" and plain.text == whole.text[:at]
    assert (resumed.completion_ids, resumed.text, resumed.finish_reason) == (
        plain.completion_ids, plain.text, plain.finish_reason)
    assert [v for v, _, _ in resumed.spans()] == [0, 1]


async def test_hf_resumed_grammar_call_keeps_its_matcher(hf: HFEngine) -> None:
    """A forced tool call interrupted mid-way continues in its grammar: the same call as
    without the interruption (same weights, same seed)."""
    from swarmrl_server.engine.grammar import tool_call_tag
    from swarmrl_server.episodes.chat import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_reply

    state = {k: v.clone() for k, v in hf.model.state_dict().items()}
    prompt = hf.tokenizer("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
                          add_special_tokens=False)["input_ids"]
    schema = {"type": "object", "properties": {"city": {"enum": ["Paris", "Lima"]}},
              "required": ["city"], "additionalProperties": False}
    tag = tool_call_tag([("get_weather", schema)], TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    params = SamplingParams(max_tokens=200, seed=5, structural_tag=tag)
    _, plain = await run_call(hf, prompt, params)
    _, resumed = await run_call(hf, prompt, params, after_tokens=2,
                                sync=lambda: hf.update_weights(state, 1, interrupt=True))
    assert resumed.completion_ids == plain.completion_ids and resumed.text == plain.text
    assert [v for v, _, _ in resumed.spans()] == [0, 1]
    assert parse_reply(resumed.text, resumed.finish_reason)[1] == "tool_calls"


async def test_hf_adapter_calls_resume_on_the_new_adapter(hf: HFEngine) -> None:
    """An interrupting adapter load moves the adapter's calls in flight to it."""
    from dataclasses import replace

    from swarmrl_server.engine.adapter import Adapter, LoraSpec

    spec = LoraSpec(rank=4, alpha=8, target_modules=("q_proj", "v_proj"))
    await hf.load_adapter("a", Adapter(spec, {}), 1)  # adds it (B = 0)
    tensors = {k: 0.05 * torch.ones_like(v) for k, v in _adapter_state(hf).items()}
    params = replace(SamplingParams(temperature=0.7, max_tokens=40, seed=2), adapter="a")
    _, out = await run_call(hf, PROMPT, params, sync=lambda: hf.load_adapter(
        "a", Adapter(spec, tensors), 2, interrupt=True))
    assert [v for v, _, _ in out.spans()] == [1, 2] and out.policy_version == 2


def _adapter_state(engine: HFEngine) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    inner = engine._adapters._inner["a"]
    return get_peft_model_state_dict(engine.model, adapter_name=inner)


async def test_echo_interrupted_call_moves_to_the_new_version(tiny_model_dir: Path) -> None:
    echo = EchoEngine.from_pretrained("tiny", tiny_model_dir, reply_tokens=40, token_delay_s=0.005)
    await echo.start()
    try:
        params = SamplingParams(temperature=1.0, max_tokens=40, seed=4)
        _, plain = await run_call(echo, PROMPT, params)
        _, waited = await run_call(echo, PROMPT, params, sync=lambda: echo.update_weights({}, 1))
        _, resumed = await run_call(echo, PROMPT, params,
                                    sync=lambda: echo.update_weights({}, 2, interrupt=True))
    finally:
        await echo.stop()
    assert waited.spans() == [(0, 0, len(waited.completion_ids))]
    (v0, _, a), (v1, b, n) = resumed.spans()
    assert (v0, v1, n) == (1, 2, len(resumed.completion_ids)) and 3 <= a == b < n
    assert resumed.completion_ids == plain.completion_ids == waited.completion_ids


async def test_a_client_sees_one_call_with_spans_in_its_record(server: Any, versions: Any) -> None:
    """Through gRPC: the stream is one call, its final record and the stored call carry
    both spans, and the tokens the client streamed are the recorded ones."""
    import swarmrl

    _, _, v1 = versions
    engine = server.swarm.models["tiny"].engine
    handle = engine.model.register_forward_hook(lambda *_: time.sleep(STEP_S))
    try:
        async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:
            async with client.episode(task_id="interrupt") as ep:
                streamed: list[int] = []
                sync: asyncio.Task[None] | None = None
                async with ep.stream_tokens(PROMPT, max_tokens=40, seed=7, temperature=0.7,
                                            stop_token_ids=[]) as stream:
                    async for chunk in stream:
                        streamed += chunk.token_ids
                        if sync is None and len(streamed) >= 3:
                            sync = asyncio.create_task(
                                engine.update_weights(v1, 1, interrupt=True))
                completion = stream.completion
                assert sync is not None
                await sync
                await ep.reward(1.0)
                episode_id = ep.id
    finally:
        handle.remove()
    n = len(completion.completion_ids)
    assert streamed == list(completion.completion_ids)
    (va, _, a), (vb, b, end) = completion.version_spans
    assert (va, vb, end) == (0, 1, n) and 3 <= a == b < n and completion.policy_version == 1
    record = await stored_episode(server, episode_id)
    assert record.calls[0].version_spans == [tuple(s) for s in completion.version_spans]
