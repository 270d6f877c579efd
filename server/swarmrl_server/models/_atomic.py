"""Build a directory at most once, atomically, so a crash never leaves a half build.

A build is written into a temp sibling of the target, a marker file is written
last, and the temp dir is renamed into place. A target without the marker is a
leftover of an older crash and is rebuilt. Two processes racing on the same
target both build; the loser of the rename throws its copy away.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

MARKER = ".swarmrl-build-complete"


def is_complete(out_dir: Path) -> bool:
    """Whether `out_dir` holds a finished build."""
    return (out_dir / MARKER).is_file()


def build_once(out_dir: Path, build: Callable[[Path], None], *, marker_text: str = "") -> Path:
    """Returns `out_dir`, calling `build(tmp_dir)` to fill it first unless it is complete."""
    out_dir = Path(out_dir).expanduser().resolve()
    if is_complete(out_dir):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = out_dir.parent / f".{out_dir.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        tmp_dir.mkdir()
        build(tmp_dir)
        (tmp_dir / MARKER).write_text(marker_text)
        if out_dir.exists() and not is_complete(out_dir):
            shutil.rmtree(out_dir)  # an interrupted build from before the marker scheme
        try:
            os.rename(tmp_dir, out_dir)
        except OSError:
            if not is_complete(out_dir):  # not a lost race: a real failure
                raise
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir
