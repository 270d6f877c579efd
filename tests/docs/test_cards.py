"""Figures quoted in the README and the docs agree with the records they link to.

A figure cites its record as a Markdown link whose target is the record's JSON file and
whose fragment is the figure's dotted path in it: ``[0.450](results/x.json#after.rate)``
(list items by index: ``evals.0.figures.success_rate``). The link text must be the value
as shown: a number rounded to the digits the text shows (a ``%``, ``+`` or ``×`` around
it allowed), or else the value's text exactly. This test reads every such link and fails
on a record that is missing, a path that does not resolve, or a figure that differs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from swarmrl.envs._card import lookup

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[([^\]]+)\]\(([^)#\s]+\.json)#([^)\s]+)\)")
PUBLISHED = REPO / "docs" / "results" / "records"
"""Where the docs site publishes ``results/`` (tools/docsgen/hook.py): a results page links
its records there, so the link works in the built site and reads the repository's file here."""
NUMBER = re.compile(r"^[+−-]?\d+(?:\.\d+)?$")


def pages() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
            *sorted((REPO / "examples").rglob("README.md"))]


def citations() -> list[tuple[Path, str, Path, str]]:
    """(page, link text, record file, dotted path) of every figure that cites a record."""
    out = []
    for page in pages():
        for text, target, path in LINK.findall(page.read_text()):
            record = (page.parent / target).resolve()
            if record.is_relative_to(PUBLISHED):  # the site's copy of results/ (the docs hook)
                record = REPO / "results" / record.relative_to(PUBLISHED)
            out.append((page, text, record, path))
    return out


def agrees(text: str, value: object) -> bool:
    shown = text.strip().strip("%×x").replace("−", "-")
    if NUMBER.match(shown) and isinstance(value, (int, float)) and not isinstance(value, bool):
        digits = len(shown.partition(".")[2])
        scale = 100 if text.strip().endswith("%") else 1
        return round(float(value) * scale, digits) == float(shown)
    return text.strip() == str(value)


def test_the_readme_cites_records_for_its_figures() -> None:
    cited = {record for page, _, record, _ in citations() if page.name == "README.md"
             and page.parent == REPO}
    assert cited, "the README's learning figures must link to their records"


@pytest.mark.parametrize("page,text,record,path", citations(),
                         ids=lambda v: v.name if isinstance(v, Path) else str(v))
def test_a_quoted_figure_equals_its_record(page: Path, text: str, record: Path,
                                           path: str) -> None:
    assert record.is_file(), f"{page.relative_to(REPO)}: {record} does not exist"
    value = lookup(json.loads(record.read_text()), path)
    assert agrees(text, value), (
        f"{page.relative_to(REPO)}: [{text}] but {record.name}#{path} is {value!r}")


@pytest.mark.parametrize("text,value,ok", [
    ("0.450", 0.45, True), ("0.450", 0.4504, True), ("0.45", 0.46, False),
    ("+0.400", 0.4, True), ("45%", 0.45, True), ("45.0%", 0.451, False),
    ("18", 18, True), ("before", "before", True), ("after", "before", False),
])
def test_the_rule_that_compares_a_figure(text: str, value: object, ok: bool) -> None:
    assert agrees(text, value) is ok
