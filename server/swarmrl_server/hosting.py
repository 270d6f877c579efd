"""A hosted model: its engine, where it came from, and (when trainable) its trainer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swarmrl_server.engine.base import Engine


@dataclass
class ModelHost:
    """Everything the server holds for one model it serves."""

    name: str
    engine: Engine
    source: str
    """The spec it was loaded from (a path, "tiny", "smollm2")."""
    path: Path | None = None
    """Directory of the weights in HF format (the trainer loads its own copy from it)."""
    trainable: bool = False
    trainer: Any = None
    """The model's trainer when trainable (see swarmrl_server.trainer)."""

    @property
    def tokenizer(self) -> Any:
        return self.engine.tokenizer  # type: ignore[attr-defined]
