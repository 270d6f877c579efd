"""docs/how-to/multi-agent.md runs: its environment file is written, every `swarmrl`
command on the page runs in order and must succeed, and its Python evaluates the
attached run's selected checkpoints per role. The page's model (smollm2) becomes the tiny
model, its minutes a few groups, its group size 2; its `swarmrl serve` line is started on
a free port, and the page's 127.0.0.1:50051 becomes that server's address."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs_support import blocks, shell_lines
from tests.helpers import REPO, ServerProcess, free_port

PAGE = REPO / "docs" / "how-to" / "multi-agent.md"
SMALL = {"smollm2": "tiny", "--minutes 20": "--groups 2 --group-size 2",
         "group_size=8": "group_size=2"}


def _small(line: str) -> str:
    for big, small in SMALL.items():
        line = line.replace(big, small)
    return line


@pytest.mark.slow
def test_the_multi_agent_page_runs(tmp_path: Path, tiny_model_dir: Path,
                                   model_cache: Path) -> None:
    page = blocks(PAGE)
    for lang, title, code in page:
        if lang == "python" and title:
            (tmp_path / title).write_text(code)
    server: ServerProcess | None = None
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}
    try:
        for lang, title, code in page:
            if lang == "sh":
                for line in shell_lines(code):
                    args = shlex.split(_small(line))
                    if args[:2] == ["swarmrl", "serve"]:
                        server = ServerProcess(data_dir=tmp_path / "served", cache_dir=model_cache,
                                               http_port=free_port(), extra=args[2:]).start()
                        continue
                    if server is not None:
                        args = [a.replace("127.0.0.1:50051", server.target) for a in args]
                    if "--target" not in args:
                        args += ["--server-arg=--cache-dir", f"--server-arg={model_cache}"]
                    done = subprocess.run([sys.executable, "-m", *args, "--no-progress"],
                                          cwd=tmp_path, capture_output=True, text=True,
                                          timeout=600, env={**env, "HOME": str(tmp_path)})
                    assert done.returncode == 0, (line, done.stderr[-3000:])
            elif lang == "python" and not title:
                assert server is not None
                done = subprocess.run(
                    [sys.executable, "-c", code.replace("127.0.0.1:50051", server.target)],
                    cwd=tmp_path, capture_output=True, text=True, timeout=600,
                    env={**env, "PYTHONPATH": f"{tmp_path}:{REPO}"})
                assert done.returncode == 0, done.stderr[-3000:]
                printed = done.stdout.splitlines()
                assert len(printed) == 4 and all("'proposer'" in p for p in printed), printed
    finally:
        if server is not None:
            server.stop()
    card = json.loads((tmp_path / "runs/relay-frozen/card.json").read_text())
    assert card["roles"]["solver"] == {"model": "base", "frozen": True, "adapter_of": "tiny"}
    card = json.loads((tmp_path / "runs/relay-self/card.json").read_text())
    assert {r["model"] for r in card["roles"].values()} == {"player"}
