"""A non-streaming call whose stream breaks mid-way (the server SIGKILLed while it
streams) is re-issued whole with the same request_id once the server is back, and the
server records exactly one call."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

import swarmrl
from swarmrl._streams import AsyncCompletionStream
from tests.helpers import ServerProcess

pytestmark = pytest.mark.slow


async def test_server_killed_mid_chat_the_call_completes_once(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache,
                           extra=["--default-max-tokens", "400"]).start()
    killed = asyncio.Event()
    reissues: list[str] = []
    original_next = AsyncCompletionStream.__anext__
    original_reissued = AsyncCompletionStream.reissued

    async def spy_next(self: AsyncCompletionStream) -> Any:
        chunk = await original_next(self)
        if not killed.is_set():  # SIGKILL as soon as the first chunk has arrived
            server.kill()
            killed.set()
        return chunk

    def spy_reissued(self: AsyncCompletionStream) -> AsyncCompletionStream:
        reissues.append(self.request_id)
        return original_reissued(self)

    monkeypatch.setattr(AsyncCompletionStream, "__anext__", spy_next)
    monkeypatch.setattr(AsyncCompletionStream, "reissued", spy_reissued)
    try:
        config = swarmrl.ClientConfig(target=server.target, retry=swarmrl.RetryPolicy(
            initial=0.05, maximum=0.5, timeout=120))
        async with swarmrl.AsyncSwarmClient(config=config) as client:
            async with client.episode(task_id="t") as ep:
                chat = asyncio.create_task(ep.chat(
                    [{"role": "user", "content": "Tell me a long story."}],
                    max_tokens=400, temperature=1.0, stop_token_ids=[]))
                await asyncio.wait_for(killed.wait(), 120)
                await asyncio.to_thread(server.start)  # same port, same data dir
                completion = await asyncio.wait_for(chat, 120)
                await ep.reward(1.0)
            info = await client.get_episode(ep.id, include_calls=True)
    finally:
        server.stop()
    assert reissues, "the stream was not interrupted mid-way"
    assert len(info.calls) == 1
    assert info.calls[0].call_id == completion.call_id
    assert info.calls[0].completion_ids == completion.completion_ids
