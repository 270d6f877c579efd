"""Who is feeding the server: live clients and every agent version's episode counts.

A client is a session with a live lease. Clients come and go while the server
trains (a client replaced by an edited one is a new session with a new agent
version); the per-version counts come from the store, so a version whose
clients are gone is still reported with everything it contributed.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from swarmrl_server.store.records import EpisodeState
from swarmrl_server.store.sqlite import SqliteStore

MAX_TASKS_LISTED = 100
"""Task ids listed per client (a client may play thousands of tasks)."""


@dataclass
class ClientSummary:
    """One live session and what its episodes did."""

    session_id: str
    client_name: str
    agent_version: str
    lease_expires_at: float
    episode_agent_versions: set[str] = field(default_factory=set)
    tasks: set[str] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    open_episodes: int = 0
    ended_episodes: int = 0
    aborted_episodes: int = 0


@dataclass
class AgentVersionSummary:
    """Episode counts of one agent version over the whole data directory."""

    agent_version: str
    open_episodes: int = 0
    ended_episodes: int = 0
    aborted_episodes: int = 0
    consumed_episodes: int = 0
    mean_reward: float = 0.0


@dataclass(frozen=True)
class LiveSession:
    """What the session table knows of a live session."""

    session_id: str
    client_name: str
    agent_version: str
    expires_at: float


async def list_clients(
    store: SqliteStore, sessions: list[LiveSession]
) -> tuple[list[ClientSummary], list[AgentVersionSummary]]:
    """Summaries of the live sessions (in the given order) and of every agent version."""
    clients = {
        s.session_id: ClientSummary(s.session_id, s.client_name, s.agent_version, s.expires_at)
        for s in sessions
    }
    for session_id, version, task, models, state, n in await store.episode_tallies(clients):
        c = clients[session_id]
        c.episode_agent_versions.add(version)
        if len(c.tasks) < MAX_TASKS_LISTED:
            c.tasks.add(task)
        c.models.update(json.loads(models))
        if state == EpisodeState.OPEN.value:
            c.open_episodes += n
        elif state == EpisodeState.ENDED.value:
            c.ended_episodes += n
        else:
            c.aborted_episodes += n
    versions: dict[str, AgentVersionSummary] = {}
    for version, state, n, mean_reward, consumed in await store.agent_version_tallies():
        v = versions.setdefault(version, AgentVersionSummary(version))
        if state == EpisodeState.OPEN.value:
            v.open_episodes += n
        elif state == EpisodeState.ENDED.value:
            v.ended_episodes += n
            v.mean_reward = float(mean_reward or 0.0)
            v.consumed_episodes += int(consumed or 0)
        else:
            v.aborted_episodes += n
    return list(clients.values()), list(versions.values())
