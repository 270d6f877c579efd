"""Where `swarmrl serve --engine vllm` finds vLLM's python (`swarmrl.vllm_venv`): where
`make vllm-venv` put it, beside the checkout swarmrl was installed from, whatever the
working directory; the error names every place looked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from swarmrl import vllm_venv
from swarmrl.vllm_venv import ENV, VENV_PYTHON, VllmPythonNotFound, places, vllm_python
from swarmrl_server.engine.vllm.server import VLLMServerError, default_vllm_python
from tests.helpers import REPO

LOOKUP = """
import json
from swarmrl.vllm_venv import places
from swarmrl_server.engine.vllm.server import VLLMServerError, default_vllm_python
try:
    found, error = str(default_vllm_python()), None
except VLLMServerError as err:
    found, error = None, str(err)
print(json.dumps({"places": [str(p) for p, _ in places()], "found": found, "error": error}))
"""


def test_a_user_folder_finds_the_checkouts_venv(tmp_path: Path) -> None:
    """`swarmrl serve --engine vllm`'s lookup in a fresh process run from a folder of the
    user's own (no .venv-vllm there): the checkout's venv, as `make vllm-venv` built it."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    done = subprocess.run([sys.executable, "-c", LOOKUP], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(done.stdout)
    assert out["places"] == [str(REPO / VENV_PYTHON), str(tmp_path / VENV_PYTHON)]
    if (REPO / VENV_PYTHON).exists():  # built by `make vllm-venv` (`make test` builds it)
        assert out["found"] == str(REPO / VENV_PYTHON)
    else:
        assert str(REPO / VENV_PYTHON) in out["error"] and str(tmp_path / VENV_PYTHON) in \
            out["error"]


def _python(root: Path) -> Path:
    path = root / VENV_PYTHON
    path.parent.mkdir(parents=True)
    path.write_text("")
    return path


def test_the_checkout_first_then_the_working_directory(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checkout, cwd = tmp_path / "checkout", tmp_path / "work"
    cwd.mkdir()
    monkeypatch.delenv(ENV, raising=False)
    monkeypatch.setattr(vllm_venv, "checkout", lambda: checkout)
    monkeypatch.chdir(cwd)
    # Neither has one: the error names both places, and the server's lookup says the same.
    with pytest.raises(VllmPythonNotFound) as caught:
        vllm_python()
    message = str(caught.value)
    assert str(checkout / VENV_PYTHON) in message and str(cwd / VENV_PYTHON) in message
    assert "make vllm-venv" in message
    with pytest.raises(VLLMServerError, match="beside the checkout"):
        default_vllm_python()
    assert vllm_python(strict=False) == checkout / VENV_PYTHON
    here = _python(cwd)
    assert vllm_python() == here
    beside = _python(checkout)
    assert vllm_python() == default_vllm_python() == beside  # the checkout's comes first
    # Run from the checkout itself: one place, looked at once.
    monkeypatch.chdir(checkout)
    assert [p for p, _ in places()] == [beside]


def test_a_python_named_by_the_variable_is_the_only_place(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_venv, "checkout", lambda: tmp_path)
    _python(tmp_path)
    monkeypatch.setenv(ENV, str(tmp_path / "elsewhere" / "python"))
    with pytest.raises(VllmPythonNotFound, match=f"elsewhere/python \\(\\${ENV}\\)"):
        vllm_python()  # never passed over for the checkout's
    monkeypatch.setenv(ENV, str(tmp_path / VENV_PYTHON))
    assert vllm_python() == tmp_path / VENV_PYTHON


def test_an_install_that_is_not_a_checkout_reads_where_pip_took_it_from(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A non-editable install (``pip install /path/to/checkout``): the package lives in
    site-packages, and PEP 610's direct_url.json names the checkout."""
    site = tmp_path / "site-packages" / "swarmrl"
    site.mkdir(parents=True)
    monkeypatch.setattr(vllm_venv, "__file__", str(site / "vllm_venv.py"))
    source = tmp_path / "my checkout"
    urls = {"direct_url.json": json.dumps({"url": source.as_uri(), "dir_info": {}})}
    monkeypatch.setattr(vllm_venv.importlib.metadata, "distribution",
                        lambda name: SimpleNamespace(read_text=urls.get))
    assert vllm_venv.checkout() == source
    urls["direct_url.json"] = json.dumps({"url": "https://example.org/swarmrl.whl"})
    assert vllm_venv.checkout() is None
    del urls["direct_url.json"]  # from an index: no direct_url.json at all
    assert vllm_venv.checkout() is None
