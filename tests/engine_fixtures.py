"""Engines of every kind on the tiny model, for the contract and training tests."""

from __future__ import annotations

import os
from pathlib import Path

from swarmrl_server.engine.base import Engine

MAX_LEN = 128
"""Context length the test engines are built with (short: the limit is cheap to reach)."""

REPO = Path(__file__).resolve().parent.parent
VLLM_PYTHON = Path(os.environ.get("SWARMRL_VLLM_PYTHON") or REPO / ".venv-vllm" / "bin" / "python")


async def make_engine(kind: str, model_dir: Path, work_dir: Path, **kwargs: object) -> Engine:
    """A started engine named `kind` ("hf", "echo" or "vllm") serving `model_dir`."""
    engine: Engine
    if kind == "hf":
        from swarmrl_server.engine.hf import HFEngine

        engine = HFEngine.from_pretrained(kind, model_dir, max_model_len=MAX_LEN, **kwargs)
    elif kind == "echo":
        from swarmrl_server.engine.echo import EchoEngine

        engine = EchoEngine.from_pretrained(kind, model_dir, max_model_len=MAX_LEN, **kwargs)
    elif kind == "vllm":
        from swarmrl_server.engine.vllm import VLLMEngine

        engine = VLLMEngine(
            kind, model_dir, python=VLLM_PYTHON, log_dir=work_dir, max_model_len=MAX_LEN,
            **kwargs,  # type: ignore[arg-type]
        )
    else:
        raise ValueError(kind)
    await engine.start()
    return engine
