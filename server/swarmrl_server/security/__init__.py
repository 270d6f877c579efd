"""Security, in one place: who is calling and what they may touch. No gRPC or HTTP here.

- `principals`: the `Principal` that owns sessions and episodes, and the one ownership
  rule (`require_owner`);
- `keys`: the server's API keys and their roles (`KeyRing`), the one bearer-token
  parser, the per-episode keys of the HTTP shim (`EpisodeKeys`) and the secret that
  signs them (`load_secret`).

The front doors only adapt: `grpc.auth` reads a call's metadata, `http.auth` a
request's headers, and both hand the token to a `KeyRing` or `EpisodeKeys` here. Every
domain entry point takes the caller explicitly (`caller=`); `IN_PROCESS` (admin rights)
is never a default.
"""

from swarmrl_server.security.keys import (
    EPISODE_KEY_PREFIX,
    EpisodeKeys,
    KeyRing,
    bearer_token,
    load_secret,
)
from swarmrl_server.security.principals import ANONYMOUS, IN_PROCESS, Principal, require_owner

__all__ = [
    "ANONYMOUS",
    "EPISODE_KEY_PREFIX",
    "IN_PROCESS",
    "EpisodeKeys",
    "KeyRing",
    "Principal",
    "bearer_token",
    "load_secret",
    "require_owner",
]
