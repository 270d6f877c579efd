"""A server SIGKILLed during a non-streaming call costs the caller nothing: the call is
answered once the server is back, and the server records exactly one call.

- `chat()` asks for the result only (no chunks), so the break comes before the first
  message and the call is re-sent with the same request_id;
- a whole-completion read of a stream that breaks after chunks arrived (what `chat()`
  meets on a server that streams chunks even so) is re-issued whole, same request_id.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

import swarmrl
from swarmrl._episode import _complete_whole
from swarmrl._streams import AsyncCompletionStream
from tests.helpers import ServerProcess, free_port, wait_until

pytestmark = pytest.mark.slow


def _client(server: ServerProcess) -> swarmrl.AsyncSwarmClient:
    """A client that retries quickly for two minutes (the server restarts meanwhile)."""
    return swarmrl.AsyncSwarmClient(config=swarmrl.ClientConfig(
        target=server.target, retry=swarmrl.RetryPolicy(initial=0.05, maximum=0.5, timeout=120)))


def _recorded_once(info: Any, completion: Any) -> None:
    """The server recorded exactly one call: the one the caller got."""
    assert len(info.calls) == 1
    assert info.calls[0].call_id == completion.call_id
    assert info.calls[0].completion_ids == completion.completion_ids


async def test_stream_broken_mid_way_is_reissued_and_recorded_once(
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
        async with _client(server) as client:
            async with client.episode(task_id="t") as ep:
                chat = asyncio.create_task(_complete_whole(ep.stream(
                    [{"role": "user", "content": "Tell me a long story."}],
                    max_tokens=400, temperature=1.0, stop_token_ids=[])))
                await asyncio.wait_for(killed.wait(), 120)
                await asyncio.to_thread(server.start)  # same port, same data dir
                completion = await asyncio.wait_for(chat, 120)
                await ep.reward(1.0)
            info = await client.get_episode(ep.id, include_calls=True)
    finally:
        server.stop()
    assert reissues, "the stream was not interrupted mid-way"
    _recorded_once(info, completion)


async def test_server_killed_during_chat_the_call_completes_once(
        tmp_path: Path, model_cache: Path, tiny_model_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL while the server generates the call (its /metrics shows it in flight)."""
    http_port = free_port()
    server = ServerProcess(data_dir=tmp_path / "data", cache_dir=model_cache, http_port=http_port,
                           extra=["--default-max-tokens", "400"]).start()
    sent: list[tuple[str, bool]] = []
    original_open = AsyncCompletionStream._open_and_read_first

    async def spy_open(self: AsyncCompletionStream, budget: Any) -> Any:
        sent.append((self.request_id, self._request.result_only))
        return await original_open(self, budget)

    def in_flight() -> bool:
        try:
            metrics = httpx.get(f"http://127.0.0.1:{http_port}/metrics", timeout=5).text
        except httpx.HTTPError:
            return False
        return 'swarmrl_queue_depth{model="tiny",queue="inflight"} 1.0' in metrics

    monkeypatch.setattr(AsyncCompletionStream, "_open_and_read_first", spy_open)
    try:
        async with _client(server) as client:
            async with client.episode(task_id="t") as ep:
                chat = asyncio.create_task(ep.chat(
                    [{"role": "user", "content": "Tell me a long story."}],
                    max_tokens=400, temperature=1.0, stop_token_ids=[]))
                await asyncio.to_thread(wait_until, in_flight, 60, "the call to be generating")
                assert not chat.done()
                server.kill()
                await asyncio.to_thread(server.start)  # same port, same data dir
                completion = await asyncio.wait_for(chat, 180)
                await ep.reward(1.0)
            info = await client.get_episode(ep.id, include_calls=True)
    finally:
        server.stop()
    assert len(sent) >= 2, "the call was not re-sent"
    assert len({rid for rid, _ in sent}) == 1, "a re-sent call must keep its request_id"
    assert all(result_only for _, result_only in sent)
    _recorded_once(info, completion)
