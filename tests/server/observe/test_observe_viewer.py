"""The episode viewer, opened in headless Chromium on a known episode of a real server."""

from __future__ import annotations

import asyncio
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image

import swarmrl
from tests.helpers import need
from tests.server_fixtures import ServerFactory

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync")


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    need(path is not None, "Debian's chromium")  # fails under make test, which installs it
    return str(path)


async def run_chromium(tmp_path: Path, *args: str) -> str:
    """Chromium as a child process; the server keeps serving in this event loop."""
    profile = tmp_path / f"chromium-profile-{len(list(tmp_path.iterdir()))}"
    proc = await asyncio.create_subprocess_exec(
        chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 90)
    assert proc.returncode == 0, err.decode()[-2000:]
    return out.decode()


class Spans(HTMLParser):
    """Collects (classes, data attributes, text) of every element of interest."""

    def __init__(self) -> None:
        super().__init__()
        self.items: list[dict[str, Any]] = []
        self._open: list[dict[str, Any] | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag in ("span", "td", "div", "b"):
            inside = any(o is not None and "timeline" in o["classes"] for o in self._open)
            item = {"tag": tag, "classes": set((a.get("class") or "").split()), "attrs": a,
                    "text": "", "in_timeline": inside}
            self.items.append(item)
            self._open.append(item)

    def handle_endtag(self, tag: str) -> None:
        if tag in ("span", "td", "div", "b") and self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for item in self._open:
            if item is not None:
                item["text"] += data

    def having(self, *classes: str, in_timeline: bool = False) -> list[dict[str, Any]]:
        """Elements with all `classes` (only those inside a token timeline, if asked)."""
        return [i for i in self.items
                if set(classes) <= i["classes"] and (i["in_timeline"] or not in_timeline)]


@pytest.fixture
async def server(make_server: ServerFactory) -> Any:
    return await make_server(http=True)


async def known_episode(server: Any) -> tuple[str, list[Any]]:
    """Four token-id calls: extend at version 0 → 3, a retry and an edit fork."""
    engine = server.swarm.models["tiny"].engine
    prompt = [11, 12, 13, 14, 15, 16]
    async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:
        async with client.episode(task_id="viewer", agent_version="a1") as ep:
            first = await ep.generate_tokens(prompt, max_tokens=4, seed=1, stop_token_ids=[])
            # New weights (the same values) at policy version 3, as a training step would.
            await engine.update_weights(engine.model.state_dict(), 3)
            grown = [*prompt, *first.completion_ids, 21, 22]
            second = await ep.generate_tokens(grown, max_tokens=3, seed=2,  # extends
                                              top_logprobs=3)
            retry = await ep.generate_tokens(prompt, max_tokens=3, seed=3)  # fork: retry
            edit = await ep.generate_tokens([*prompt[:3], 30, 31], max_tokens=2, seed=4)  # edit
            await ep.reward(0.75)
            return ep.id, [first, second, retry, edit]


async def test_viewer_in_chromium_shows_trained_tokens_forks_and_versions(
        server: Any, tmp_path: Path) -> None:
    episode_id, calls = await known_episode(server)
    assert [c.policy_version for c in calls] == [0, 3, 3, 3]
    url = f"{server.http.base_url}/view/episodes/{episode_id}"
    dom = Spans()
    dom.feed(await run_chromium(tmp_path, "--dump-dom", url))

    trained = dom.having("tok", "trained", in_timeline=True)
    context = dom.having("tok", "context", in_timeline=True)
    generated = sum(len(c.completion_ids) for c in calls)
    assert len(trained) == generated  # every generated token trains exactly once
    # Timelines: [first + second] (prompt 6 + 4 + 2 new), retry, edit; context = the rest.
    lengths = [len(calls[1].prompt_ids) + len(calls[1].completion_ids),
               len(calls[2].prompt_ids) + len(calls[2].completion_ids),
               len(calls[3].prompt_ids) + len(calls[3].completion_ids)]
    assert len(context) == sum(lengths) - generated
    by_version: dict[str, int] = {}
    for t in trained:
        by_version[t["attrs"]["data-v"]] = by_version.get(t["attrs"]["data-v"], 0) + 1
    assert by_version == {"0": len(calls[0].completion_ids),
                          "3": sum(len(c.completion_ids) for c in calls[1:])}
    assert all(t["classes"] & {f"lp{k}" for k in range(6)} for t in trained)
    # The call that asked for top logprobs has them on hover; the others have none.
    tops = [json.loads(t["attrs"]["data-top"]) for t in trained if "data-top" in t["attrs"]]
    assert len(tops) == len(calls[1].completion_ids)
    assert all(len(alts) == 3 and all(lp <= 0 for _, lp in alts) for alts in tops)
    # A retry fork and an edit fork, each marked where it leaves the first timeline.
    forks = {i["attrs"]["data-fork"] for i in dom.having("timeline-card")}
    assert forks == {"", "retry", "edit"}
    assert [m["text"] for m in dom.having("marker", "fork-retry", in_timeline=True)] == [
        f"fork: retry @ {len(calls[2].prompt_ids)}"]
    assert [m["text"] for m in dom.having("marker", "fork-edit", in_timeline=True)] == [
        "fork: edit @ 3"]
    # The policy version of each call: at its start marker and in the calls table.
    starts = [m["text"] for m in dom.having("marker", "call-start", in_timeline=True)]
    assert starts == ["call 0 · v0", "call 1 · v3", "call 2 · v3", "call 3 · v3"]
    assert [td["text"] for td in dom.having("policy-version")] == ["v0", "v3", "v3", "v3"]
    reward = [i for i in dom.items if i["attrs"].get("id") == "reward"]
    assert reward and reward[0]["text"] == "0.7500"

    shot = tmp_path / "viewer-episode.png"
    await run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,900", url)
    with Image.open(shot) as img:
        assert img.format == "PNG" and img.size == (1400, 900)
        assert len(img.getcolors(1 << 20) or []) > 20  # rendered, not a blank page


async def test_list_filters_group_packing_and_export(server: Any) -> None:
    episode_id, calls = await known_episode(server)
    async with swarmrl.AsyncSwarmClient(server.grpc_target) as client:
        async with client.episode(task_id="other", agent_version="a2") as ep:
            await ep.chat([{"role": "user", "content": "Hi"}], max_tokens=2)
            await ep.reward(0.0)
        other = ep.id
    async with httpx.AsyncClient(base_url=f"{server.http.base_url}/view") as http:
        page = (await http.get("/", params={"task": "viewer"})).text
        assert episode_id in page and other not in page
        page = (await http.get("/", params={"agent": "a2", "min_reward": "-1"})).text
        assert other in page and episode_id not in page
        page = (await http.get("/", params={"min_reward": "0.5"})).text
        assert episode_id in page and other not in page
        bad = await http.get("/", params={"min_reward": "lots"})
        assert bad.status_code == 400 and bad.json()["error"]["param"] == "min_reward"
        assert (await http.get("/episodes/ep-nope")).status_code == 404

        lines = (await http.get(f"/episodes/{episode_id}/export.jsonl")).text.splitlines()
        head, *rows = (json.loads(line) for line in lines)
        assert head["episode_id"] == episode_id and head["reward"] == 0.75
        assert [r["completion_ids"] for r in rows] == [c.completion_ids for c in calls]
        assert [r["policy_version"] for r in rows] == [0, 3, 3, 3]

        group = (await http.get("/groups", params={"task": "viewer", "group": "viewer"})).text
        dom = Spans()
        dom.feed(group)
        segments = dom.having("seg")
        # The episode's three timelines share their first 3 tokens, two of them 6: a
        # shared root, a shared child, and one segment per timeline for the rest.
        assert [seg["text"].split("\n")[1].strip() for seg in segments] == [
            "segment 0 · tokens 0–3 · 3 timeline(s) of 1 episode(s)",
            "segment 1 · tokens 3–6 · 2 timeline(s) of 1 episode(s)",
            "segment 2 · tokens 6–15 · 1 timeline(s) of 1 episode(s)",
            "segment 3 · tokens 6–9 · 1 timeline(s) of 1 episode(s)",
            "segment 4 · tokens 3–7 · 1 timeline(s) of 1 episode(s)",
        ]
        assert [("shared" in seg["classes"]) for seg in segments] == [True, True, False, False,
                                                                      False]


async def test_offline_viewer_reads_a_data_dir(server: Any, model_cache: Path) -> None:
    """`swarmrl view DATA_DIR`'s app, over the data dir of a server that is still running."""
    from fastapi import FastAPI

    from swarmrl_server.observe.viewer.cli import open_source
    from swarmrl_server.observe.viewer.web import attach_viewer

    episode_id, calls = await known_episode(server)
    for models, expect_text in ((["tiny"], True), ([], False)):
        source = await open_source(server.config.data_dir, models, model_cache)
        try:
            app = FastAPI()
            attach_viewer(app, source)
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                         base_url="http://viewer") as http:
                page = (await http.get(f"/view/episodes/{episode_id}")).text
                listing = (await http.get("/view/")).text
        finally:
            await source.store.close()
        assert episode_id in listing
        dom = Spans()
        dom.feed(page)
        tokens = dom.having("tok", in_timeline=True)
        assert len(dom.having("tok", "trained", in_timeline=True)) == sum(
            len(c.completion_ids) for c in calls)
        first = tokens[0]
        assert first["attrs"]["data-id"] == "11"
        # With the model's tokenizer tokens read as text; without one, as ⟨id⟩.
        assert (first["text"] != "⟨11⟩") is expect_text


async def test_top_logprobs_are_stored_and_old_stores_migrate(tmp_path: Path) -> None:
    import sqlite3

    from swarmrl_server.store.records import CallRecord, EpisodeRecord, EpisodeState
    from swarmrl_server.store.sqlite import SqliteStore

    def call(seq: int, top: list[list[tuple[int, float]]]) -> CallRecord:
        return CallRecord(call_id=f"c{seq}", episode_id="e", seq=seq, model="m",
                          prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.5, -0.25],
                          policy_version=0, finish_reason="stop", temperature=1.0, text="",
                          top_logprobs=top)

    path = tmp_path / "swarm.sqlite3"
    store = SqliteStore(path)
    await store.open()
    await store.create_episode(EpisodeRecord("e", "s", "t", "t", "", ["m"], {},
                                             EpisodeState.OPEN, 0.0))
    await store.add_call(call(0, []))
    await store.close()
    with sqlite3.connect(path) as conn:  # a data dir from before top logprobs were kept
        conn.execute("ALTER TABLE calls DROP COLUMN top_logprobs")
    store = SqliteStore(path)
    await store.open()
    try:
        top = [[(3, -0.5), (9, -1.5)], [(4, -0.25), (7, -2.0)]]
        await store.add_call(call(1, top))
        record = await store.get_episode("e", with_calls=True)
    finally:
        await store.close()
    assert record is not None
    assert [c.top_logprobs for c in record.calls] == [[], top]
