"""What the tests that run a documentation page's code share: its fenced blocks, in order,
and a shell block's commands. A block right after a ``<!-- not run: WHY -->`` line (one
that needs what a test cannot have) is left out."""

from __future__ import annotations

import re
from pathlib import Path

FENCE = re.compile(r"^(<!-- not run[^>]*-->\n)?```(\w+)([^\n]*)\n(.*?)^```", re.M | re.S)


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """(language, title or "", code) of each fenced block of `page` that runs, in order."""
    out = []
    for skip, lang, info, code in FENCE.findall(page.read_text()):
        if skip:
            continue
        title = re.search(r'title="([^"]+)"', info)
        out.append((lang, title[1] if title else "", code))
    return out


def shell_lines(code: str) -> list[str]:
    """The block's commands, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", code)
    return [line.split("  #")[0].strip() for line in joined.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]
