"""Where the python of vLLM's own venv is, for `swarmrl serve --engine vllm` and run cards.

vLLM lives in a venv of its own (`make vllm-venv` writes ``.venv-vllm`` in the checkout:
its transformers range conflicts with verl's), and swarmrl launches ``vllm serve`` with
that venv's python. Looked for, in order:

1. ``$SWARMRL_VLLM_PYTHON``: when set, the only place (a path given is never passed over);
2. ``.venv-vllm/bin/python`` beside the checkout swarmrl was installed from, where
   ``make vllm-venv`` put it, whatever the working directory a user runs from;
3. ``.venv-vllm/bin/python`` under the working directory.

A public module of the SDK with no import beyond the standard library: the server (which
imports no private SDK module) and the SDK's run cards (which import nothing of the
server) share this one rule.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import urllib.parse
import urllib.request
from pathlib import Path

ENV = "SWARMRL_VLLM_PYTHON"
VENV_PYTHON = Path(".venv-vllm") / "bin" / "python"


class VllmPythonNotFound(FileNotFoundError):
    """No vLLM python at any place looked (the message names every one)."""


def checkout() -> Path | None:
    """The checkout swarmrl was installed from: the source tree this module runs from when
    it is one (an editable install, or the tree on PYTHONPATH), else the directory pip was
    given (PEP 610's ``direct_url.json``); None for an install from an index."""
    here = Path(__file__).resolve().parents[2]  # <checkout>/sdk_python/swarmrl/vllm_venv.py
    if (here / "pyproject.toml").is_file() and (here / "sdk_python").is_dir():
        return here
    try:
        text = importlib.metadata.distribution("swarmrl").read_text("direct_url.json")
    except importlib.metadata.PackageNotFoundError:
        return None
    url = urllib.parse.urlparse(json.loads(text).get("url", "")) if text else None
    if url is None or url.scheme != "file":
        return None
    return Path(urllib.request.url2pathname(url.path))


def places() -> list[tuple[Path, str]]:
    """Where the vLLM python is looked for, in order, each with why it is looked at."""
    given = os.environ.get(ENV)
    if given:
        return [(Path(given), f"${ENV}")]
    out = []
    root = checkout()
    if root is not None:
        out.append((root / VENV_PYTHON, "beside the checkout swarmrl was installed from"))
    cwd = Path.cwd() / VENV_PYTHON
    if not out or out[0][0] != cwd:
        out.append((cwd, "under the working directory"))
    return out


def vllm_python(strict: bool = True) -> Path:
    """The first place of `places` that holds a python. None does: VllmPythonNotFound
    naming every place looked (`strict`), or the first place (for a caller that runs it
    and handles the OSError itself)."""
    looked = places()
    for path, _ in looked:
        if path.exists():
            return path
    if not strict:
        return looked[0][0]
    where = "; ".join(f"{path} ({why})" for path, why in looked)
    raise VllmPythonNotFound(
        f"no vLLM python: looked at {where}. Run `make vllm-venv` in the swarmrl checkout, "
        f"or name one with --vllm-python or ${ENV}")


__all__ = ["ENV", "VENV_PYTHON", "VllmPythonNotFound", "checkout", "places", "vllm_python"]
