"""A JSON snapshot of what a server is doing now, for `swarmrl top` (``GET /swarmrl/live``):
what the admin RPCs do not carry (trainer progress per task, open episodes' idle
time, call and token totals, recent errors). Clients come from ``ListClients``.

Everything here is read from memory (no store query), so polling it every second
costs the server next to nothing. Lists are capped; counts are not.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from swarmrl_server.swarm import Swarm

MAX_EPISODES = 200
MAX_ERRORS = 20
LAST_STEP_KEYS = ("reward/mean", "loss/total", "time/step_s", "stale/mean", "merge/compression")


def _trainer(trainer: Any, telemetry: Any, name: str) -> dict[str, Any]:
    config = trainer.config
    pending_by_task = Counter(r.task_id for r in trainer.pending_records())
    last = telemetry.last_step(name)
    return {
        "step": trainer.step, "max_steps": config.max_steps, "policy_version": trainer.policy_version,
        "pending": trainer.pending, "error": repr(trainer.error) if trainer.error else "",
        "batch_rule": config.batch_rule, "batch_size": config.batch_size,
        "group_size": config.group_size,
        "tasks": [{"task_id": t, "pending": n} for t, n in sorted(pending_by_task.items())],
        "last": {k: last[k] for k in LAST_STEP_KEYS if k in last},
    }


def snapshot(swarm: Swarm) -> dict[str, Any]:
    now = time.time()
    telemetry = swarm.telemetry
    models = []
    for name, host in swarm.models.items():
        stats = getattr(host.engine, "stats", None)
        models.append({
            "name": name, "policy_version": host.engine.policy_version,
            "trainable": host.trainable, "inflight": swarm.episodes.inflight(name),
            "engine_waiting": stats.waiting if stats is not None else None,
            "engine_running": stats.active_rows if stats is not None else None,
            "trainer": (_trainer(host.trainer, telemetry, name)
                        if host.trainer is not None else None),
        })
    open_eps = sorted(swarm.episodes.open_episodes(), key=lambda e: e[2])
    return {
        "server_instance": swarm.instance, "time": now,
        "paused": swarm.paused_reason or "",
        "sessions": len(swarm.sessions),
        "episodes": {"open": swarm.episodes.open_count, **telemetry.episode_counts()},
        "totals": telemetry.totals(),
        "models": models,
        "open_episodes": [
            {"episode_id": r.episode_id, "task_id": r.task_id, "agent_version": r.agent_version,
             "models": r.models, "session_id": r.session_id, "calls": calls,
             "idle_s": round(now - last, 1), "age_s": round(now - r.start_time, 1)}
            for r, calls, last in open_eps[:MAX_EPISODES]
        ],
        "errors": [
            {"time": e.time, "door": e.door, "method": e.method, "code": e.code,
             "message": e.message}
            for e in list(telemetry.recent_errors)[-MAX_ERRORS:]
        ],
    }
