"""Group commit: concurrent calls share transactions, each returns only once it is durable."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import pytest

from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore


def call(i: int, episode_id: str = "ep-1", call_id: str = "") -> CallRecord:
    return CallRecord(call_id=call_id or f"c-{i}", episode_id=episode_id, seq=i, model="m",
                      prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5], policy_version=0,
                      finish_reason="stop", temperature=1.0, text="x", created_at=time.time())


def committed(path: Path) -> set[str]:
    """Call ids a second connection sees (what survives a crash now)."""
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT call_id FROM calls")}


async def test_concurrent_calls_share_commits_and_each_returns_committed(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"
    store = SqliteStore(path)
    await store.open()
    await store.create_episode(EpisodeRecord("ep-1", "s", "t", "t", "", ["m"], {},
                                             EpisodeState.OPEN, time.time()))
    transactions = 0
    tx = store._tx

    def counting_tx(statements):  # type: ignore[no-untyped-def]
        nonlocal transactions
        transactions += 1
        return tx(statements)

    store._tx = counting_tx  # type: ignore[method-assign]

    async def add(i: int) -> None:
        await store.add_call(call(i))
        assert f"c-{i}" in committed(path)  # durable before add_call returned

    await asyncio.gather(*(add(i) for i in range(40)))
    assert committed(path) == {f"c-{i}" for i in range(40)}
    assert transactions < 40  # grouped: the ones waiting behind a commit share the next

    # One bad row (a duplicate id) fails its own caller only.
    results = await asyncio.gather(
        store.add_call(call(40)), store.add_call(call(41, call_id="c-0")),
        store.add_call(call(42)), return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sqlite3.IntegrityError)
    assert {"c-40", "c-42"} <= committed(path)
    await store.close()
    with pytest.raises(AssertionError):
        _ = store.conn
