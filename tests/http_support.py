"""Helpers for the HTTP shim tests: episodes, clients, a scripted engine.

The official `openai` and `anthropic` clients are the conformance oracle; they talk
to a real server (gRPC + HTTP in one loop, tiny model) on loopback.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

from swarmrl_server.engine.base import (
    Engine,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
)
from swarmrl_server.security import IN_PROCESS


@dataclass
class Ep:
    """An open episode and what a client needs to address it."""

    episode_id: str
    key: str
    base_url: str
    """OpenAI base URL (…/v1)."""

    @property
    def root_url(self) -> str:
        """Anthropic base URL (the client appends /v1/messages)."""
        return self.base_url.removesuffix("/v1")


async def start_episode(running: Any, models: Sequence[str] = (), task_id: str = "t") -> Ep:
    swarm = running.swarm
    session = f"s-{len(swarm.sessions) + 1}-{task_id}"
    await swarm.sessions.open(session, "test", 60.0, caller=IN_PROCESS)
    record, key = await swarm.episodes.start(
        session_id=session, task_id=task_id, group_id="", agent_version="",
        models=list(models), request_id="", labels={}, caller=IN_PROCESS)
    return Ep(record.episode_id, key, running.openai_base_url)


def aclient(ep: Ep, **kw: Any) -> Any:
    """The official async openai client on episode `ep`, with retries off."""
    import openai

    return openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0, **kw)


class ScriptedEngine(Engine):
    """A real engine's tokenizer with scripted replies: the model says exactly `replies`.

    A random tiny model never emits a well-formed tool call; this engine does, token by
    token, so tool parsing, streaming and multi-turn extension are tested through the
    real registry, renderer and HTTP stack. Everything but the sampling is real.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.tokenizer = inner.tokenizer
        self.name = inner.name
        self.max_model_len = inner.max_model_len
        self.vocab_size = inner.vocab_size
        self.eos_token_ids = inner.eos_token_ids
        self.replies: list[str] = []
        self.prompts: list[list[int]] = []

    @property
    def policy_version(self) -> int:
        return 0

    async def start(self) -> None:
        pass

    async def stop(self) -> None:
        pass

    async def update_weights(self, state_dict: Any, policy_version: int, *,
                             interrupt: bool = False) -> None:
        pass

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        self.prompts.append(list(prompt_ids))
        text = self.replies.pop(0)
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = [*ids, self.eos_token_ids[0]]
        finish = "stop"
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
        decoded = ""
        for i, t in enumerate(ids):
            now = self.tokenizer.decode(ids[: i + 1], skip_special_tokens=True)
            yield GenerationChunk([t], [-0.5], now[len(decoded):])
            decoded = now
            await asyncio.sleep(0)
        yield GenerationOutput(list(prompt_ids), ids, [-0.5] * len(ids), decoded, finish, 0)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}


def tool_call_text(name: str, arguments: dict[str, Any], before: str = "") -> str:
    """A reply in the chat template's documented tool-call format."""
    import json

    body = json.dumps({"name": name, "arguments": arguments})
    return f"{before}\n<tool_call>\n{body}\n</tool_call>" if before else \
        f"<tool_call>\n{body}\n</tool_call>"
