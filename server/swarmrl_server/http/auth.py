"""The HTTP door's adapter of `security`: which episode a request belongs to.

`StartEpisode` hands out `sk-swarm-<episode_id>.<mac>`; an agent sends it as
`Authorization: Bearer ...` (OpenAI clients), `x-api-key: ...` (Anthropic
clients), or inside the base URL (`/k/<key>/v1/...`) for harnesses whose key is
not configurable. The key is verified by its HMAC (nothing stored per key) and
reaches only its own episode.
"""

from __future__ import annotations

from fastapi import Request

from swarmrl_server.errors import SwarmError
from swarmrl_server.http.errors import HttpError, from_swarm_error
from swarmrl_server.security import EPISODE_KEY_PREFIX, IN_PROCESS, KeyRing, bearer_token
from swarmrl_server.store.records import EpisodeRecord, EpisodeState
from swarmrl_server.swarm import Swarm

PATH_KEY = "episode_key"
"""Path parameter of the `/k/{episode_key}` prefix routes."""


def api_key(request: Request) -> str:
    """The key a request carries (path prefix, then Bearer, then x-api-key), or ""."""
    in_path = request.path_params.get(PATH_KEY)
    if in_path:
        return str(in_path)
    return (bearer_token(request.headers.get("authorization", ""))
            or request.headers.get("x-api-key", "").strip())


class EpisodeAuth:
    """Resolves a request to its open episode, or fails with 401 / 404 / 409."""

    def __init__(self, swarm: Swarm, server_keys: KeyRing | None = None) -> None:
        self._swarm = swarm
        self._server_keys = server_keys or KeyRing()

    async def open_episode(self, request: Request) -> EpisodeRecord:
        key = api_key(request)
        episode_id = self._swarm.episodes.keys.episode_for(key) if key else None
        if episode_id is None:
            raise HttpError(
                401,
                "missing or invalid API key: use the per-episode key (sk-swarm-...) that "
                "StartEpisode returned",
                code="invalid_api_key",
            )
        record = self._swarm.episodes.open_record(episode_id)
        if record is not None:  # the common case, answered from memory
            return record
        try:
            record = await self._swarm.episodes.get(episode_id, caller=IN_PROCESS)
        except SwarmError as err:
            raise from_swarm_error(err) from None
        if record.state is not EpisodeState.OPEN:
            raise HttpError(
                409, f"episode {episode_id} is {record.state.value}; start a new episode",
                code="EPISODE_NOT_OPEN",
            )
        return record

    async def check_listing(self, request: Request) -> None:
        """Listing models needs an episode key (any state) or a server key; a server
        with no keys configured (like its gRPC side) lets anyone list."""
        key = api_key(request)
        if key and self._swarm.episodes.keys.episode_for(key) is not None:
            return
        if key and self._server_keys.role(key) is not None:
            return
        if not self._server_keys.enabled and not key.startswith(EPISODE_KEY_PREFIX):
            return
        raise HttpError(401, "missing or invalid API key", code="invalid_api_key")
