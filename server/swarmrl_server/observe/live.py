"""A snapshot of what a server is doing now, for `swarmrl top`: the protos' LiveSnapshot,
served by ``AdminService.GetLiveSnapshot`` and, as JSON from the same message, by the
shim's ``GET /swarmrl/live`` (trainer progress per task, open episodes' idle time, call
and token totals, recent errors). Clients come from ``ListClients``.

Everything here is read from memory (no store query), so polling it every second
costs the server next to nothing. Lists are capped; counts are not.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format

from swarmrl_proto.v1 import admin_service_pb2 as admin_pb

if TYPE_CHECKING:
    from swarmrl_server.hosting import TrainerHandle
    from swarmrl_server.observe.telemetry import Telemetry
    from swarmrl_server.swarm import Swarm

MAX_EPISODES = 200
MAX_ERRORS = 20
LAST_STEP_KEYS = ("reward/mean", "loss/total", "time/step_s", "stale/mean", "merge/compression")


def _trainer(trainer: TrainerHandle, telemetry: Telemetry, name: str) -> admin_pb.LiveTrainer:
    config = trainer.config
    pending_by_task = Counter(r.task_id for r in trainer.pending_records())
    last = telemetry.last_step(name)
    return admin_pb.LiveTrainer(
        step=trainer.step, max_steps=config.max_steps or 0,
        policy_version=trainer.policy_version, pending=trainer.pending,
        error=repr(trainer.error) if trainer.error else "",
        batch_rule=config.batch_rule, batch_size=config.batch_size,
        group_size=config.group_size,
        tasks=[admin_pb.LiveTaskQueue(task_id=t, pending=n)
               for t, n in sorted(pending_by_task.items())],
        last={k: last[k] for k in LAST_STEP_KEYS if k in last},
    )


def snapshot(swarm: Swarm) -> admin_pb.LiveSnapshot:
    """The server now (see `AdminService.GetLiveSnapshot` in the protos)."""
    now = time.time()
    telemetry = swarm.telemetry
    models = []
    for name, host in swarm.models.items():
        stats = getattr(host.engine, "stats", None)
        model = admin_pb.LiveModel(
            name=name, policy_version=host.engine.policy_version,
            trainable=host.trainable, inflight=swarm.episodes.inflight(name),
        )
        if stats is not None:
            model.engine_waiting, model.engine_running = stats.waiting, stats.active_rows
        if host.trainer is not None:
            model.trainer.CopyFrom(_trainer(host.trainer, telemetry, name))
        models.append(model)
    open_eps = sorted(swarm.episodes.open_episodes(), key=lambda e: e[2])
    counts = telemetry.episode_counts()
    return admin_pb.LiveSnapshot(
        server_instance=swarm.instance, time=now,
        paused=swarm.paused_reason or "",
        sessions=len(swarm.sessions),
        episodes=admin_pb.LiveEpisodeCounts(
            open=swarm.episodes.open_count, ended=counts.get("ended", 0),
            aborted=counts.get("aborted", 0)),
        totals=admin_pb.LiveTotals(**telemetry.totals()),
        models=models,
        open_episodes=[
            admin_pb.LiveEpisode(
                episode_id=r.episode_id, task_id=r.task_id, agent_version=r.agent_version,
                models=r.models, session_id=r.session_id, calls=calls,
                idle_s=round(now - last, 1), age_s=round(now - r.start_time, 1))
            for r, calls, last in open_eps[:MAX_EPISODES]
        ],
        errors=[
            admin_pb.LiveError(time=e.time, door=e.door, method=e.method, code=e.code,
                               message=e.message)
            for e in list(telemetry.recent_errors)[-MAX_ERRORS:]
        ],
    )


def snapshot_json(swarm: Swarm) -> dict[str, Any]:
    """The same snapshot as JSON (GET /swarmrl/live): every field present, field names
    as in the protos."""
    return as_json(snapshot(swarm))


def as_json(live: admin_pb.LiveSnapshot) -> dict[str, Any]:
    """`live` in proto3's JSON mapping (field names as in the protos, defaults written)."""
    return json_format.MessageToDict(
        live, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
