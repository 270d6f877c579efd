"""Shared by the observability tests: a training server on loopback, both doors on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

TRAIN_OPTIONS = {"progress": "false", "batch_rule": "episodes", "batch_size": "2",
                 "group_size": "2", "checkpoint_every": "0", "checkpoint_on_stop": "false"}


async def start_training_server(data_dir: Path, model_cache: Path,
                                train_options: dict[str, str] | None = None, **config: Any) -> Any:
    from swarmrl_server.app import start_server
    from swarmrl_server.config import ModelSpec, ServerConfig

    return await start_server(ServerConfig(
        models=(ModelSpec("tiny", "tiny"),), port=0, http_port=0, data_dir=data_dir,
        cache_dir=model_cache, grace_s=0.5, train=True, train_options={**TRAIN_OPTIONS, **(train_options or {})},
        **config))
