"""Where the viewer reads episodes: a running server's store, or a data dir offline.

Both are a `SqliteStore` (a server's data dir can be read while the server runs: WAL)
plus, per model, a tokenizer (to show text) and a shape (for the packing planner).
Without a tokenizer the viewer shows token ids.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarmrl_server.observe.viewer.episodes import Decode, ids_only
from swarmrl_server.store.records import EpisodeRecord, EpisodeState
from swarmrl_server.store.sqlite import SqliteStore
from swarmrl_server.timelines.flops import ModelShape

DEFAULT_SHAPE = ModelShape(n_layers=4, hidden=256, attn_dim=256, vocab=32_000,
                           non_embedding_params=3_000_000)
"""Used for the packing plan when a model's config is unknown (offline, no --model)."""


@dataclass(frozen=True)
class EpisodeFilter:
    task_id: str = ""
    model: str = ""
    agent_version: str = ""
    state: str = ""
    group_id: str = ""
    min_reward: float | None = None
    max_reward: float | None = None

    def matches(self, r: EpisodeRecord) -> bool:
        if self.task_id and r.task_id != self.task_id:
            return False
        if self.group_id and r.group_id != self.group_id:
            return False
        if self.model and self.model not in r.models:
            return False
        if self.agent_version and r.agent_version != self.agent_version:
            return False
        if self.state and r.state.value != self.state:
            return False
        if self.min_reward is not None and (r.reward is None or r.reward < self.min_reward):
            return False
        return not (self.max_reward is not None and (r.reward is None or r.reward > self.max_reward))


def _decoder(tokenizer: Any) -> Decode:
    @functools.lru_cache(maxsize=200_000)
    def one(token_id: int) -> str:
        return str(tokenizer.decode([token_id]))

    def decode(ids: Sequence[int]) -> list[str]:
        return [one(int(i)) for i in ids]

    return decode


def model_shape(path: Path | None) -> ModelShape:
    """The FLOP model's shape from a weights dir's config (parameters estimated as
    12·layers·hidden², the usual dense-transformer count)."""
    if path is None or not (path / "config.json").is_file():
        return DEFAULT_SHAPE
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(path)
    estimate = 12 * int(config.num_hidden_layers) * int(config.hidden_size) ** 2
    return ModelShape.from_config(config, estimate)


@dataclass
class EpisodeSource:
    store: SqliteStore
    tokenizers: dict[str, Any] = field(default_factory=dict)
    model_dirs: dict[str, Path | None] = field(default_factory=dict)
    label: str = ""
    """Shown in the page header: the server or the data dir."""

    def __post_init__(self) -> None:
        self._decoders: dict[str, Decode] = {}
        self._shapes: dict[str, ModelShape] = {}

    def decoder(self, model: str) -> Decode:
        if model not in self._decoders:
            tok = self.tokenizers.get(model)
            self._decoders[model] = _decoder(tok) if tok is not None else ids_only
        return self._decoders[model]

    def shape(self, model: str) -> ModelShape:
        if model not in self._shapes:
            self._shapes[model] = model_shape(self.model_dirs.get(model))
        return self._shapes[model]

    async def episodes(self, where: EpisodeFilter, limit: int = 500) -> list[EpisodeRecord]:
        """Newest first."""
        found: list[EpisodeRecord] = []
        states = [EpisodeState(where.state)] if where.state else list(EpisodeState)
        for state in states:
            found.extend(r for r in await self.store.list_episodes(state) if where.matches(r))
        found.sort(key=lambda r: r.start_time, reverse=True)
        return found[:limit]

    async def episode(self, episode_id: str) -> EpisodeRecord | None:
        return await self.store.get_episode(episode_id, with_calls=True)

    async def group(self, task_id: str, group_id: str) -> list[EpisodeRecord]:
        heads = await self.episodes(EpisodeFilter(task_id=task_id, group_id=group_id), limit=64)
        full = [await self.store.get_episode(r.episode_id, with_calls=True) for r in heads]
        return sorted((r for r in full if r is not None), key=lambda r: r.start_time)
