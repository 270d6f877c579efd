"""The viewer's routes (Jinja2 pages, a JSONL export), mountable on any FastAPI app.

Pages: ``/view/`` (episodes, filtered by task / model / agent version / state /
reward), ``/view/episodes/{id}`` (calls and timelines, token by token),
``/view/episodes/{id}/export.jsonl`` and ``/view/groups?task=&group=`` (the
tree-packing view of a group). With API keys configured, only an admin key may look
(``Authorization: Bearer`` or ``?key=``, which the pages carry along in their links).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import HTMLResponse, StreamingResponse
from jinja2 import Environment, PackageLoader, select_autoescape

from swarmrl_server.errors import Reason, invalid, not_found
from swarmrl_server.observe.viewer.episodes import episode_view, export_jsonl, group_view
from swarmrl_server.observe.viewer.source import EpisodeFilter, EpisodeSource

PREFIX = "/view"
LIST_LIMIT = 500

_env = Environment(loader=PackageLoader("swarmrl_server.observe.viewer", "templates"),
                   autoescape=select_autoescape(["html"]))
_env.filters["timefmt"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def _reward(text: str | None, name: str) -> float | None:
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        raise invalid(name, f"not a number: {text!r}") from None


def _render(request: Request, source: EpisodeSource, template: str, **context: Any) -> HTMLResponse:
    key = request.query_params.get("key", "")

    def keyq(sep: str) -> str:
        return f"{sep}key={urllib.parse.quote(key)}" if key else ""

    html = _env.get_template(template).render(
        base=PREFIX, key=key, keyq=keyq, source_label=source.label, **context)
    return HTMLResponse(html)


def attach_viewer(app: FastAPI, source: EpisodeSource,
                  guard: Callable[[Request], None] | None = None) -> None:
    """Adds the viewer's routes to `app` (guard: a dependency that may refuse)."""
    router = APIRouter(prefix=PREFIX, include_in_schema=False,
                       dependencies=[Depends(guard)] if guard else [])

    @router.get("/", response_class=HTMLResponse)
    async def index(request: Request, task: str = "", model: str = "", agent: str = "",
                    state: str = "", min_reward: str = "", max_reward: str = "") -> HTMLResponse:
        if state and state not in ("open", "ended", "aborted"):
            raise invalid("state", f"one of open, ended, aborted; got {state!r}")
        where = EpisodeFilter(task_id=task, model=model, agent_version=agent, state=state,
                              min_reward=_reward(min_reward, "min_reward"),
                              max_reward=_reward(max_reward, "max_reward"))
        episodes = await source.episodes(where, LIST_LIMIT)
        every = await source.episodes(EpisodeFilter(), 5000)  # the filters' choices
        selects = [
            ("task", "task", sorted({e.task_id for e in every})),
            ("model", "model", sorted({m for e in every for m in e.models})),
            ("agent", "agent version", sorted({e.agent_version for e in every} - {""})),
            ("state", "state", ["open", "ended", "aborted"]),
        ]
        filters = {"task": task, "model": model, "agent": agent, "state": state,
                   "min_reward": min_reward, "max_reward": max_reward}
        return _render(request, source, "index.html", episodes=episodes, selects=selects,
                       filters=filters, limit=LIST_LIMIT)

    async def _episode(episode_id: str) -> Any:
        record = await source.episode(episode_id)
        if record is None:
            raise not_found(Reason.EPISODE_NOT_FOUND, "episode", episode_id)
        return record

    @router.get("/episodes/{episode_id}", response_class=HTMLResponse)
    async def episode(request: Request, episode_id: str) -> HTMLResponse:
        record = await _episode(episode_id)
        return _render(request, source, "episode.html",
                       view=episode_view(record, source.decoder))

    @router.get("/episodes/{episode_id}/export.jsonl")
    async def export(episode_id: str) -> StreamingResponse:
        record = await _episode(episode_id)
        return StreamingResponse(
            export_jsonl(record), media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{episode_id}.jsonl"'})

    @router.get("/groups", response_class=HTMLResponse)
    async def group(request: Request, task: str, group: str, model: str = "") -> HTMLResponse:
        records = await source.group(task, group)
        if not records:
            raise not_found(Reason.GROUP_NOT_FOUND, "group", f"{task}/{group}")
        model = model or records[0].models[0]
        g = group_view(records, model, source.decoder(model), source.shape(model))
        depth: dict[int, int] = {}
        for s in g.segments:
            depth[s.index] = depth[s.parent] + 1 if s.parent >= 0 else 0
        return _render(request, source, "group.html", g=g, depth=depth)

    app.include_router(router)
