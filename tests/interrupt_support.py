"""What the interruptible-weight-sync tests share (tests/server/engine/test_interrupt.py on the in-process
engines, tests/server/engine/test_vllm_interrupt.py on vLLM): a prompt, two weight versions of the
tiny model, a call run with a sync in its middle, and the exact check of each span's
logprobs against a plain forward at that span's weights."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams
from swarmrl_server.models import load_model

PROMPT = [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def versions(tiny_model_dir: Path) -> Iterator[tuple[torch.nn.Module, dict[str, torch.Tensor],
                                                     dict[str, torch.Tensor]]]:
    """A reference model and two weight versions: the original (v0) and a perturbed v1."""
    model, _ = load_model(tiny_model_dir)
    v0 = {k: v.clone() for k, v in model.state_dict().items()}
    gen = torch.Generator().manual_seed(0)
    model.load_state_dict({k: v + 0.05 * torch.randn(v.shape, generator=gen)
                           for k, v in v0.items()})
    v1 = {k: v.clone() for k, v in model.state_dict().items()}  # tied weights: one value
    yield model, v0, v1


async def run_call(engine: Engine, prompt: list[int], params: SamplingParams, *,
                   sync: Any = None, after_tokens: int = 3
                   ) -> tuple[list[GenerationChunk], GenerationOutput]:
    """Runs one call; once `after_tokens` tokens have streamed, awaits `sync()` (an
    update) while the call keeps streaming. Checks the chunks add up to the output."""
    chunks: list[GenerationChunk] = []
    task: asyncio.Task[Any] | None = None
    async for item in engine.generate(prompt, params):
        if isinstance(item, GenerationOutput):
            if task is not None:
                await task
            assert [t for c in chunks for t in c.token_ids] == item.completion_ids
            assert [lp for c in chunks for lp in c.logprobs] == item.logprobs
            assert "".join(c.text for c in chunks) == item.text
            assert item.policy_version == item.spans()[-1][0]
            return chunks, item
        chunks.append(item)
        if sync is not None and task is None and sum(len(c.token_ids) for c in chunks) >= after_tokens:
            task = asyncio.create_task(sync())
    raise AssertionError("no GenerationOutput")


def recompute(model: torch.nn.Module, state: dict[str, torch.Tensor], prompt: list[int],
              ids: list[int], temperature: float) -> torch.Tensor:
    """Logprobs of `ids` after `prompt` under `state` (a plain forward, fp32)."""
    model.load_state_dict(state)
    with torch.no_grad():
        logits_T_V = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits_T_V / temperature, -1).gather(
        1, torch.tensor(ids)[:, None])[:, 0]


def assert_spans_exact(out: GenerationOutput, model: torch.nn.Module,
                       states: dict[int, dict[str, torch.Tensor]], temperature: float) -> None:
    """Each span's logprobs equal the recompute under its version's weights."""
    for version, start, end in out.spans():
        ref_T = recompute(model, states[version], out.prompt_ids, out.completion_ids, temperature)
        got_T = torch.tensor(out.logprobs[start:end])
        assert got_T.sub(ref_T[start:end]).abs().max().item() <= 1e-4, (version, start, end)
