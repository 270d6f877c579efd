"""The HTTP door's adapter of `security`: which episode a request belongs to.

`StartEpisode` hands out `sk-swarm-<episode_id>.<mac>`; an agent sends it as
`Authorization: Bearer ...` (OpenAI clients), `x-api-key: ...` (Anthropic
clients), inside the base URL (`/k/<key>/v1/...`) for harnesses whose key is
not configurable, or as `X-Swarmrl-Episode: <key>` on the plain `/v1/...` URL. The
header is for harnesses that keep one HTTP client (one connection pool) per
configuration: every episode of a run shares the one base URL, and each request
names its episode; it wins over `Authorization` / `x-api-key`, which such harnesses
may fill with a key of their own (verifiers sets one from an environment variable).
The key is verified by its HMAC (nothing stored per key) and reaches only its own
episode. Server keys (`security.KeyRing`) travel only as `Authorization` /
`x-api-key`, never in the episode header.
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


EPISODE_HEADER = "x-swarmrl-episode"
"""The header that names a request's episode by its key (HTTP header names are
case-insensitive; the SDK sends `X-Swarmrl-Episode`)."""


def credential(request: Request) -> str:
    """The key in `Authorization: Bearer` or `x-api-key` (an episode's or a server's), or ""."""
    return (bearer_token(request.headers.get("authorization", ""))
            or request.headers.get("x-api-key", "").strip())


def api_key(request: Request) -> str:
    """The episode key a request carries, or "": the path prefix, then the episode
    header, then `credential`. The first one present decides: a bad key in the header
    is refused, not passed over for Authorization."""
    in_path = request.path_params.get(PATH_KEY)
    if in_path:
        return str(in_path)
    return request.headers.get(EPISODE_HEADER, "").strip() or credential(request)


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
        server_key = credential(request)
        if server_key and self._server_keys.role(server_key) is not None:
            return
        if not self._server_keys.enabled and not key.startswith(EPISODE_KEY_PREFIX):
            return
        raise HttpError(401, "missing or invalid API key", code="invalid_api_key")
