"""Checkpoints: everything a trainer needs to continue exactly where it stopped.

Layout: ``<data_dir>/checkpoints/<model>/step-<N>/`` holding

- the model in HF format (``model.safetensors``, config, tokenizer), so a checkpoint
  is also something ``swarmrl serve --model DIR`` can serve; under LoRA the adapter
  alone in peft's layout (``adapter_model.safetensors``, ``adapter_config.json``:
  `trainer/lora.py`);
- ``optimizer.pt`` (AdamW state) and ``rng.pt`` (torch, numpy and random states);
- ``trainer_state.json``: model name, step, policy version, trainer config and the
  ids of the episodes consumed up to this step.

Writes are atomic: everything goes to a temporary sibling directory that is
renamed into place, so a crash mid-write leaves the previous checkpoint as the
latest one.

Retention: the most recent `keep` checkpoints (the trainer's keep_checkpoints) are
kept, except those *kept on request*: a checkpoint a client asked for (SaveCheckpoint)
holds a marker file, ``kept.json`` (`mark_kept`), written and fsynced in its step
directory, so a restarted server still knows it. Pruning never counts or removes a
marked checkpoint; only `delete` does, on a client's request, and it never removes the
newest checkpoint of all (the one a restarted server resumes from). So a client that
keeps what it may come back to (the best by validation, the latest) and deletes the
rest holds its disk use bounded without ever losing either.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from swarmrl_server.errors import Code, Reason, SwarmError, invalid

STATE_FILE = "trainer_state.json"
KEPT_FILE = "kept.json"
"""The marker of a checkpoint kept on request: outside automatic retention."""
_STEP_DIR = re.compile(r"^step-(\d+)$")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                    "vocab.json", "merges.txt", "chat_template.jinja", "generation_config.json")


@dataclass
class TrainerState:
    model: str
    step: int
    policy_version: int
    config: dict[str, Any]
    consumed: list[str]
    """Episode ids consumed (trained or dropped) up to and including `step`."""


def checkpoint_root(data_dir: Path, model: str) -> Path:
    return data_dir / "checkpoints" / model


def rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "random": random.getstate()}


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["random"])


def save(
    root: Path,
    state: TrainerState,
    model: Any,
    optimizer: torch.optim.Optimizer,
    *,
    source_dir: Path | None = None,
    keep: int = 3,
) -> Path:
    """Writes step-N under `root` atomically; returns its path. Prunes older ones."""
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{state.step}"
    tmp = Path(tempfile.mkdtemp(prefix=f".step-{state.step}-", dir=root))
    try:
        model.save_pretrained(tmp, safe_serialization=True)
        if source_dir is not None:  # the tokenizer, so the checkpoint is servable as is
            for name in TOKENIZER_FILES:
                if (source_dir / name).is_file() and not (tmp / name).exists():
                    shutil.copy2(source_dir / name, tmp / name)
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        torch.save(rng_state(), tmp / "rng.pt")
        (tmp / STATE_FILE).write_text(json.dumps(state.__dict__, indent=1))
        if is_kept(final):  # a step saved again keeps its mark
            shutil.copy2(final / KEPT_FILE, tmp / KEPT_FILE)
        _fsync_dir_files(tmp)
        if final.exists():  # re-saving a step (e.g. on stop right after a periodic save)
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    prune(root, keep)
    return final


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir_files(path: Path) -> None:
    for f in path.iterdir():
        if f.is_file():
            _fsync(f)
    _fsync(path)


def list_steps(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first."""
    if not root.is_dir():
        return []
    out = []
    for p in root.iterdir():
        m = _STEP_DIR.match(p.name)
        if m and (p / STATE_FILE).is_file():
            out.append((int(m.group(1)), p))
    return sorted(out)


def prune(root: Path, keep: int) -> None:
    """Removes all but the `keep` newest checkpoints not kept on request (and the
    leftovers of interrupted writes and deletes)."""
    steps = [(n, p) for n, p in list_steps(root) if not is_kept(p)]
    for _, path in steps[: max(len(steps) - keep, 0)]:
        shutil.rmtree(path, ignore_errors=True)
    for p in root.glob(".step-*"):  # temp dirs of writes (and deletes) a crash interrupted
        shutil.rmtree(p, ignore_errors=True)


def is_kept(path: Path) -> bool:
    """Whether the checkpoint at `path` is kept on request (outside retention)."""
    return (path / KEPT_FILE).is_file()


def mark_kept(path: Path, reason: str = "SaveCheckpoint") -> None:
    """Marks the checkpoint at `path` kept on request, durably (file and directory
    fsynced): pruning leaves it, a restarted server too, until `delete` removes it."""
    marker = path / KEPT_FILE
    tmp = path / f".{KEPT_FILE}.tmp"
    tmp.write_text(json.dumps({"reason": reason, "time": time.time()}) + "\n")
    _fsync(tmp)
    os.replace(tmp, marker)
    _fsync(path)


def delete(root: Path, path: str) -> Path:
    """Removes the checkpoint at `path` (as `save` returned it) from `root`, the model's
    checkpoint folder; returns the directory removed.

    Refused, naming ``path``: a path that is not a step directory directly under `root`
    (INVALID_ARGUMENT: nothing outside the model's checkpoints is ever touched), a step
    directory with no complete checkpoint (NOT_FOUND), and the newest checkpoint, the
    one a restarted server resumes from (FAILED_PRECONDITION). The directory is first
    renamed out of the checkpoints' view, so a crash mid-delete leaves no half checkpoint
    that a resume could pick (`prune` clears the rest)."""
    if not path:
        raise invalid("path", "a checkpoint directory is required")
    target = Path(path).expanduser().resolve()
    if target.parent != root.resolve() or not _STEP_DIR.match(target.name):
        raise invalid("path", f"{path} is not a checkpoint directory under {root}")
    if not (target / STATE_FILE).is_file():
        raise SwarmError(Code.NOT_FOUND, Reason.CHECKPOINT_NOT_FOUND,
                         f"path: no checkpoint at {path}", field="path",
                         metadata={"path": path})
    newest = list_steps(root)[-1][1]
    if newest.resolve() == target:
        raise SwarmError(Code.FAILED_PRECONDITION, Reason.CHECKPOINT_NEWEST,
                         f"path: {path} is the newest checkpoint, the one a restarted server "
                         "resumes from; it is never deleted", field="path")
    doomed = root / f".{target.name}-deleted-{uuid.uuid4().hex[:8]}"
    os.replace(target, doomed)
    _fsync(root)
    shutil.rmtree(doomed, ignore_errors=True)
    return target


def resolve(path: Path, model: str) -> Path:
    """The checkpoint `--resume PATH` means for `model`.

    PATH may be a step directory, a model's checkpoint folder (latest step), the
    ``checkpoints`` folder, or a data dir (latest step of `model` under it).
    """
    path = path.expanduser()
    if (path / STATE_FILE).is_file():
        return path
    for root in (path, path / model, path / "checkpoints" / model):
        steps = list_steps(root)
        if steps:
            return steps[-1][1]
    raise FileNotFoundError(f"no checkpoint of model {model!r} under {path}")


def by_step(root: Path, name: str) -> Path | None:
    """The checkpoint a client names by its step (``12`` or ``step-12``) under a model's
    checkpoint folder `root`; None when `name` is not a step. A client cannot see the
    server's data dir, so a step is how it names a checkpoint without a path."""
    m = re.fullmatch(r"(?:step-)?(\d+)", name)
    return root / f"step-{int(m.group(1))}" if m else None


def load_state(path: Path) -> TrainerState:
    return TrainerState(**json.loads((path / STATE_FILE).read_text()))


def load_into(path: Path, model: Any, optimizer: torch.optim.Optimizer) -> TrainerState:
    """Loads weights (or the LoRA adapter), optimizer and RNG states from a checkpoint;
    returns its trainer state."""
    from swarmrl_server.trainer import lora

    state = load_state(path)
    if lora.is_lora(model) or lora.is_adapter_checkpoint(path):
        if not lora.is_lora(model):
            raise ValueError(f"checkpoint {path} holds a LoRA adapter: resume it with the "
                             f"lora_rank it was trained with ({state.config.get('lora_rank')})")
        lora.load_adapter(path, model)
    else:
        _load_full_weights(path, model)
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=False))
    set_rng_state(torch.load(path / "rng.pt", weights_only=False))
    return state


def _load_full_weights(path: Path, model: Any) -> None:
    from safetensors.torch import load_file

    weights = load_file(str(path / "model.safetensors"))
    missing, unexpected = model.load_state_dict(weights, strict=False)
    # Tied weights (lm_head = embed_tokens) are saved once; anything else missing is an error.
    tied = set(getattr(model, "_tied_weights_keys", None) or {})
    if isinstance(getattr(model, "_tied_weights_keys", None), dict):
        tied = set(model._tied_weights_keys)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise ValueError(f"checkpoint {path} does not fit the model: missing {missing[:5]}, "
                         f"unexpected {unexpected[:5]}")
    model.tie_weights()
