"""mypy --strict over the SDK and the server, as `make lint` runs it (pyproject.toml's
[tool.mypy]). CI runs `make test` only, so the type check is a test: any error fails it.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import REPO

tomllib = pytest.importorskip("tomllib")  # Python 3.11+; mypy's settings are read as TOML


def test_mypy_checks_both_packages_strictly() -> None:
    settings = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert settings["strict"] is True
    assert {"sdk_python/swarmrl", "server/swarmrl_server"} <= set(settings["files"])
    # Modules may be excused only here, by name, and none is: the list stays empty.
    excused = [o["module"] for o in settings.get("overrides", []) if o.get("ignore_errors")]
    assert excused == [["swarmrl_proto.*"]]  # generated code only


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mypy_strict_finds_no_error() -> None:
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-20_000:] + done.stderr[-5_000:]
