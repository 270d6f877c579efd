"""A run folder survives its writer being killed: the card is replaced whole or not at all
(`_card.write_atomic`), so a resumed run always reads a card."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from swarmrl.envs import _card
from tests.helpers import REPO

# The writer writes card "old", then card "new" with io.open patched so that the write of
# the JSON stops halfway: half the text is flushed to the file, "mid-write" is printed,
# and the writer waits to be killed.
_WRITER = """
import io, json, sys, time
from pathlib import Path
from swarmrl.envs import _card

out = Path(sys.argv[1])
def card(tag):
    return {"kind": "train", "created": "t", "argv": [], "server": {}, "packages": {},
            "env": {"label": "e", "spec": "m:E", "args": {}}, "tag": tag,
            "evals": [{"name": f"v{i}", "split": "val", "pad": "x" * 1000} for i in range(2000)]}

_card.write(out, card("old"))
real_open = io.open

class Stalls:
    def __init__(self, f):
        self._f = f
    def write(self, text):
        if not text.startswith("{"):
            return self._f.write(text)
        self._f.write(text[: len(text) // 2])
        self._f.flush()
        print("mid-write", flush=True)
        time.sleep(600)
    def __getattr__(self, name):
        return getattr(self._f, name)
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        return self._f.__exit__(*exc)

def stalling_open(file, mode="r", *args, **kwargs):
    f = real_open(file, mode, *args, **kwargs)
    return Stalls(f) if "w" in mode else f

io.open = stalling_open
_card.write(out, card("new"))
"""


@pytest.mark.slow
def test_a_card_killed_mid_write_reads_back_whole(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path)], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # EOF (an empty line) if the writer died first
        assert line.strip() == "mid-write", "the writer did not reach its second write"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    # Half of the new JSON went to disk, but not into card.json: it reads back whole.
    assert json.loads((tmp_path / "card.json").read_text())["tag"] == "old"
    assert list(tmp_path.glob(".card.json.*.tmp"))  # the killed writer's half file
    card = _card.read(tmp_path)
    assert card is not None and card["tag"] == "old" and len(card["evals"]) == 2000
    assert not list(tmp_path.glob(".card.*.tmp"))  # read() clears what a killed writer left
    assert (tmp_path / "card.md").read_text().startswith("# Run card: train")
