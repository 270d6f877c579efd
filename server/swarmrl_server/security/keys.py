"""API keys: the server's keys and their roles, per-episode keys, and the bearer parser.

Server keys travel as `authorization: Bearer <key>` (gRPC metadata or an HTTP header).
An admin key may call everything; a client key everything but the admin calls. Keys
are compared as SHA-256 digests with `hmac.compare_digest`, so neither the comparison
time nor a memory dump reveals them. Each key names a principal, the owner of what it
opens: `NAME=KEY` binds principal NAME (several keys may share one, e.g. while rotating
them); a bare KEY is its own principal, named by a digest of it.

Per-episode keys (`sk-swarm-<episode_id>.<mac>`, handed out by StartEpisode for the
HTTP shim) are the episode id plus an HMAC of it under the server's secret: nothing is
stored per key, a restarted server (same data dir, same secret) honours keys it issued
before, and a key reaches only its own episode.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from pathlib import Path

from swarmrl_server.security.principals import ANONYMOUS, Principal

EPISODE_KEY_PREFIX = "sk-swarm-"


def bearer_token(authorization: str) -> str:
    """The token of an `Authorization: Bearer <token>` value (the scheme in any case, as
    RFC 6750 allows), or "" for anything else."""
    scheme, _, token = authorization.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode()).digest()


def _principal_and_key(spec: str) -> tuple[str, str]:
    """`NAME=KEY` → (NAME, KEY); a bare KEY → (key-<digest>, KEY). Only an identifier-like
    NAME counts, so base64 padding (`...==`) in a bare key is not taken for a binding."""
    name, sep, key = spec.partition("=")
    if sep and key and name and all(ch.isalnum() or ch in "-_.@" for ch in name):
        return name, key
    return "key-" + hashlib.sha256(spec.encode()).hexdigest()[:16], spec


class KeyRing:
    """The configured server keys and the principal (and role) each stands for."""

    def __init__(self, admin_keys: Iterable[str] = (), client_keys: Iterable[str] = ()) -> None:
        self._admin = [(_digest(k), n) for n, k in map(_principal_and_key, admin_keys)]
        self._client = [(_digest(k), n) for n, k in map(_principal_and_key, client_keys)]

    @property
    def enabled(self) -> bool:
        return bool(self._admin or self._client)

    def identify(self, key: str) -> Principal | None:
        """The principal `key` stands for; None for an unknown key on a keyed server.
        A server with no keys has one anonymous principal for every caller."""
        if not self.enabled:
            return ANONYMOUS
        d = _digest(key)
        for digest, name in self._admin:
            if hmac.compare_digest(d, digest):
                return Principal(name, admin=True)
        for digest, name in self._client:
            if hmac.compare_digest(d, digest):
                return Principal(name)
        return None

    def role(self, key: str) -> str | None:
        """"admin" or "client" for a configured key; None otherwise (and on a server
        with no keys, where nobody holds a role)."""
        principal = self.identify(key) if self.enabled else None
        if principal is None:
            return None
        return "admin" if principal.admin else "client"


class EpisodeKeys:
    """Per-episode API keys for the HTTP shim, signed with the server's secret."""

    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, episode_id: str) -> str:
        return hmac.new(self._secret, episode_id.encode(), hashlib.sha256).hexdigest()[:32]

    def key_for(self, episode_id: str) -> str:
        return f"{EPISODE_KEY_PREFIX}{episode_id}.{self._mac(episode_id)}"

    def episode_for(self, key: str) -> str | None:
        """The episode a key addresses, or None when the key is not one we issued."""
        if not key.startswith(EPISODE_KEY_PREFIX) or "." not in key:
            return None
        episode_id, mac = key[len(EPISODE_KEY_PREFIX):].rsplit(".", 1)
        return episode_id if hmac.compare_digest(mac, self._mac(episode_id)) else None


def load_secret(data_dir: Path | None) -> bytes:
    """The server's key-signing secret: kept in the data dir so issued keys survive restarts."""
    if data_dir is None:
        return secrets.token_bytes(32)
    path = data_dir / "secret"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(secrets.token_bytes(32))
        tmp.chmod(0o600)
        tmp.rename(path)
    return path.read_bytes()
