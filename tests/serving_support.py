"""What the tests of served logprobs after a trainer step share (LoRA on hf, on Ray
replicas and on vLLM): a prompt of token ids, one call run to its end, and the trainer's
own recompute of a completion's logprobs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import torch

from swarmrl_server.engine.base import Engine, GenerationChunk, GenerationOutput, SamplingParams

PROMPT = [5, 6, 7, 8, 9, 10]


async def run(engine: Engine, params: SamplingParams) -> GenerationOutput:
    """The final output of one call on PROMPT."""
    async for item in engine.generate(PROMPT, params):
        if isinstance(item, GenerationOutput):
            return item
    raise AssertionError("no output")


async def collect(stream: AsyncIterator[GenerationChunk | GenerationOutput]
                  ) -> list[GenerationChunk | GenerationOutput]:
    """Every chunk and the output of one call's stream."""
    return [item async for item in stream]


def recompute(model: Any, completion: list[int], temperature: float) -> torch.Tensor:
    """The logprobs of `completion` after PROMPT under `model` (a plain forward, fp32)."""
    with torch.no_grad():
        logits_T_V = model(input_ids=torch.tensor([PROMPT + completion])).logits[
            0, len(PROMPT) - 1 : -1].float()
    return torch.log_softmax(logits_T_V / temperature, -1).gather(
        1, torch.tensor(completion)[:, None])[:, 0]
