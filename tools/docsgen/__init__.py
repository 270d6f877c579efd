"""The documentation site's generated pages (`make docs`; `hook.py` is the MkDocs hook).

Each module turns one source of truth into Markdown at build time, so the reference can
never drift from the code: the command lines from their argparse parsers, the train
options from the trainer's own table, the protos from their comments, the HTTP API from
the OpenAPI document the FastAPI app builds, the errors from the reasons the server
raises, and the results pages from the committed records under `results/`. Nothing here
is committed as Markdown; `tests/docs/test_docs.py` builds the site and compares the pages
with what the commands print.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def use_this_tree() -> None:
    """Import the SDK and the server from this checkout, not from whatever is installed."""
    for path in (REPO / "server", REPO / "sdk_python", REPO):
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))


def cell(text: object) -> str:
    """One Markdown table cell: no line breaks, no bare pipes."""
    return " ".join(str(text).split()).replace("|", "\\|")


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
