"""The tutorials' code runs: a tutorial that rots fails the build.

Each page of docs/tutorials/ is read top to bottom. Its `swarmrl serve` line is the server
(every page names the same one, so one server runs them all; it is started here on free
ports, on the tiny model); `python` blocks run in order in one namespace per page;
`python title="NAME"` blocks are written to NAME in the page's working directory; `sh`
lines that start with `swarmrl` run and must succeed (other lines, installs, are skipped);
a block after a `<!-- not run: WHY -->` line is skipped.
The tutorials' 127.0.0.1:50051 / :8000 become the test server's addresses.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.docs_support import blocks, shell_lines
from tests.helpers import ServerProcess, free_port

REPO = Path(__file__).resolve().parents[2]
TUTORIALS = sorted((REPO / "docs" / "tutorials").glob("*.md"))


def serve_args() -> list[str]:
    found = {tuple(shlex.split(line)[2:]) for page in TUTORIALS
             for lang, _, code in blocks(page) if lang == "sh"
             for line in shell_lines(code) if line.startswith("swarmrl serve ")}
    assert len(found) == 1, f"the tutorials must share one server command, got {found}"
    return list(found.pop())


@pytest.fixture(scope="module")
def tutorial_server(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path,
                    model_cache: Path) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("tutorial-server")
    server = ServerProcess(data_dir=root / "data", cache_dir=model_cache, http_port=free_port(),
                           extra=serve_args())
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_every_tutorial_has_code() -> None:
    assert TUTORIALS
    for page in TUTORIALS:
        if page.name != "index.md":
            assert any(lang == "python" for lang, _, _ in blocks(page)), page.name


@pytest.mark.slow
@pytest.mark.parametrize("page", [p for p in TUTORIALS if p.name != "index.md"],
                         ids=lambda p: p.stem)
def test_tutorial_runs(page: Path, tutorial_server: ServerProcess, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch, textworld_games: Path) -> None:
    # The pages' TextWorld games (runs/textworld-games) are the suite's shared ones: the
    # same level and seed make the same game, compiled once (tests/conftest.py).
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "textworld-games").symlink_to(textworld_games)

    def local(code: str) -> str:
        return (code.replace("127.0.0.1:50051", tutorial_server.target)
                .replace("127.0.0.1:8000", f"127.0.0.1:{tutorial_server.http_port}"))

    monkeypatch.chdir(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO / "sdk_python"), str(REPO / "server"), str(REPO),
         os.environ.get("PYTHONPATH", "")]),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    namespace: dict[str, object] = {"__name__": "__tutorial__"}
    ran = 0
    for lang, title, code in blocks(page):
        if lang == "python" and title:
            (tmp_path / title).write_text(code)
        elif lang == "python":
            exec(compile(local(code), f"{page.name}:block", "exec"), namespace)  # noqa: S102
            ran += 1
        elif lang == "sh":
            for line in shell_lines(code):
                if not line.startswith("swarmrl ") or line.startswith("swarmrl serve "):
                    continue
                argv = shlex.split(local(line))
                argv = [sys.executable, "-m", "swarmrl._cli", *argv[1:]]
                argv = [sys.executable if a == "python" else a for a in argv]
                done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True,
                                      text=True, timeout=240)
                assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
                ran += 1
    assert ran, f"{page.name}: nothing ran"
