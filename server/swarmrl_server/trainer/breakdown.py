"""Per-task and per-agent-version metrics of one training step.

A swarm mixes tasks (``task_mix``) and agent versions (clients swapped for edited
ones while the server trains), so a step's averages hide which part moved. Each
step also reports, per task, ``task/<task>/…`` and, per agent version,
``agent/<version>/…``: ``episodes`` (trained), ``dropped`` (consumed without
training: stale, uniform rewards, …), ``reward_mean``, ``length_mean`` (generated
tokens per episode) and ``stale_mean`` (policy versions behind). Names are capped
at `MAX_KEYS` of each kind so TensorBoard stays usable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.trainer.step import EpisodeRows

MAX_KEYS = 32
"""Most tasks (and most agent versions) broken out per step."""

NO_VERSION = "unversioned"
"""The key of episodes whose client gave no agent version."""


def step_breakdown(
    records: Mapping[str, EpisodeRecord],
    trained: Sequence[EpisodeRows],
    staleness: Sequence[int],
    dropped: Mapping[str, Sequence[EpisodeRecord]],
) -> dict[str, float]:
    """`task/…` and `agent/…` metrics of a step that trained `trained` (with
    `staleness` in the same order) and dropped `dropped` (by reason)."""
    out: dict[str, float] = {}
    kinds: list[tuple[str, Callable[[EpisodeRecord], str]]] = [
        ("task", lambda r: r.task_id),
        ("agent", lambda r: r.agent_version or NO_VERSION),
    ]
    for prefix, key_of in kinds:
        used: dict[str, list[tuple[EpisodeRows, int]]] = {}
        for rows, stale in zip(trained, staleness):
            used.setdefault(key_of(records[rows.episode_id]), []).append((rows, stale))
        drops: dict[str, int] = {}
        for reason_records in dropped.values():
            for record in reason_records:
                drops[key_of(record)] = drops.get(key_of(record), 0) + 1
        keys = sorted(set(used) | set(drops))
        if len(keys) > MAX_KEYS:
            continue
        for key in keys:
            members = used.get(key, [])
            n = len(members)
            out[f"{prefix}/{key}/episodes"] = float(n)
            out[f"{prefix}/{key}/dropped"] = float(drops.get(key, 0))
            if n:
                out[f"{prefix}/{key}/reward_mean"] = sum(r.reward for r, _ in members) / n
                out[f"{prefix}/{key}/length_mean"] = sum(r.num_generated for r, _ in members) / n
                out[f"{prefix}/{key}/stale_mean"] = sum(s for _, s in members) / n
    return out
