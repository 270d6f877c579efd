"""Per-span policy versions: every call records which version generated which completion
tokens. Today a call has one span, (policy_version, 0, len(completion)); it round-trips
through the gRPC final record, GetEpisode, the SQLite store (also one written before the
column existed), the HTTP `swarmrl` extension and the viewer."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx

import swarmrl
from swarmrl_server.store.schema import prepare
from tests.http_support import aclient, start_episode
from tests.store_support import stored_episode

PROMPT = [11, 12, 13, 14, 15, 16]


async def test_one_span_round_trips_everywhere(http_server: Any) -> None:
    running = http_server
    engine = running.swarm.models["tiny"].engine
    async with swarmrl.AsyncSwarmClient(running.grpc_target) as client:
        async with client.episode(task_id="spans") as ep:
            first = await ep.generate_tokens(PROMPT, max_tokens=4, seed=1, stop_token_ids=[])
            await engine.update_weights(engine.model.state_dict(), 2)
            second = await ep.generate_tokens(PROMPT, max_tokens=3, seed=2, stop_token_ids=[])
            await ep.reward(1.0)
            episode_id = ep.id
        # The gRPC final record.
        assert first.version_spans == ((0, 0, 4),) and first.policy_version == 0
        assert second.version_spans == ((2, 0, 3),) and second.policy_version == 2
        # GetEpisode's call records.
        info = await client.get_episode(episode_id, include_calls=True)
        assert [c.version_spans for c in info.calls] == [((0, 0, 4),), ((2, 0, 3),)]
    # The store: stored with the call, read back as written.
    record = await stored_episode(running, episode_id)
    assert [c.version_spans for c in record.calls] == [[(0, 0, 4)], [(2, 0, 3)]]
    # The HTTP extension: one list of spans per choice (chat and text completions).
    oai = aclient(await start_episode(running))
    chat = await oai.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=3, n=2,
        seed=5, extra_body={"return_token_ids": True})
    text = await oai.completions.create(model="tiny", prompt="Hello", max_tokens=3, seed=5,
                                        extra_body={"return_token_ids": True})
    for reply in (chat, text):
        assert reply.swarmrl["policy_version"] == 2
        assert reply.swarmrl["version_spans"] == [
            [[2, 0, len(c.token_ids)]] for c in reply.choices]
    # The viewer: the version cell carries the spans, the export lists them.
    async with httpx.AsyncClient(base_url=f"{running.http.base_url}/view") as http:
        page = (await http.get(f"/episodes/{episode_id}")).text
        assert 'data-spans="[[2, 0, 3]]"' in page and ">v2</td>" in page
        lines = (await http.get(f"/episodes/{episode_id}/export.jsonl")).text.splitlines()
    assert '"version_spans": [[0, 0, 4]]' in lines[1]


def test_calls_stored_before_spans_read_as_one_span(tmp_path: Path) -> None:
    from swarmrl_server.store.rows import CALL_COLUMNS, call_from_row

    conn = sqlite3.connect(tmp_path / "old.db")
    prepare(conn)
    conn.execute("ALTER TABLE calls DROP COLUMN grammar")  # as an older server wrote it
    conn.execute("ALTER TABLE calls DROP COLUMN version_spans")
    conn.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                 ("c1", "e1", 0, "tiny", b"", bytes(8), bytes(8), 5, "stop", 1.0, "", "",
                  "", None, 0.0, "", 0, ""))
    prepare(conn)  # migrates
    prepare(conn)  # idempotent
    call = call_from_row(conn.execute(f"SELECT {CALL_COLUMNS} FROM calls").fetchone())
    assert call.version_spans == [] and call.spans() == [(5, 0, 2)]
    assert call.grammar == ""  # from before grammars were kept: trained as context
