"""The documentation: the README stays short with every link resolving, the site builds
with --strict, and the generated reference says what the commands themselves print."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.docsgen import cli, train_options

REPO = Path(__file__).resolve().parents[2]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[`*_\[\]]|\(.*?\)", "", heading.strip().lower()) if "](" in heading else \
        re.sub(r"[`*_]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    return {_slug(m[1]) for m in re.finditer(r"^#{1,6} (.+)$", text, flags=re.M)}


def test_readme_is_short_and_every_relative_link_resolves() -> None:
    readme = REPO / "README.md"
    text = readme.read_text()
    assert len(text.splitlines()) <= 200
    links = [m[1] for m in LINK.finditer(re.sub(r"```.*?```", "", text, flags=re.S))]
    relative = [link for link in links if not re.match(r"[a-z]+:", link)]
    assert len(relative) > 20, relative
    for link in relative:
        target, _, anchor = link.partition("#")
        path = (REPO / target).resolve() if target else readme
        assert path.exists(), f"README links to {link}: no such file"
        if anchor and path.suffix == ".json":
            continue  # a figure citing its record: tests/docs/test_cards.py checks the path
        if anchor:
            assert path.suffix == ".md", link
            assert anchor in _anchors(path), f"README links to {link}: no such heading"


def test_slug_matches_github() -> None:
    assert _slug("Quick start (30 seconds)") == "quick-start-30-seconds"
    assert _slug("TextWorld, level 2") == "textworld-level-2"


def _run(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-m", "swarmrl._cli", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def _flat(text: str) -> str:
    return "".join(text.split())  # argparse wraps lines at spaces and at hyphens


@pytest.mark.parametrize("command", ["serve", "status", "run", "study run", "train", "eval",
                                     "compare"])
def test_cli_reference_matches_help(command: str) -> None:
    """Every option `swarmrl COMMAND --help` prints is on the page with its help, and the
    page has no option the command lacks."""
    printed = _run(*command.split(), "--help")
    page = cli.render()
    parser = dict(cli.parsers())[f"swarmrl {command}"]
    rows = cli.option_rows(parser)
    documented = {s for names, _, _ in rows for s in re.findall(r"(?<![\w-])--?[\w][\w-]*", names)}
    in_help = set(re.findall(r"(?<![\w-])--[\w][\w-]*", printed))
    assert in_help <= documented | {"--"}, in_help - documented
    for names, _, help_ in rows:
        assert f"`{names}`" in page
        if help_:
            assert _flat(help_) in _flat(printed), (command, names)


def test_train_option_reference_matches_the_trainers_table() -> None:
    printed = train_options.parse(_run("serve", "--train-option", "help"))
    assert len(printed) > 30
    assert printed == train_options.options()
    page = train_options.render()
    for name, default, _ in printed:
        assert f"| `{name}` | `{default}` |" in page


@pytest.mark.slow
def test_the_site_builds_strict(tmp_path: Path) -> None:
    """`make docs`: every page, generated ones included, with warnings as errors. Run as
    the Makefile runs it: ``-q`` would drop the warnings that ``--strict`` counts, and a
    broken link would pass."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("reference/cli", "reference/train-options", "reference/protos",
                 "reference/http-api", "reference/errors", "reference/sdk", "results/learning",
                 "results/performance", "tutorials/first-run"):
        assert (site / page / "index.html").stat().st_size > 5_000, page
    assert "StartEpisode" in (site / "reference/protos/index.html").read_text()
    assert "level2-nofmt-s0.json" in (site / "results/learning/index.html").read_text()
    assert (site / "reference/openapi.json").exists()


def test_results_records_render() -> None:
    from tools.docsgen import results

    groups = results.used_groups(REPO / "docs")
    assert "textworld-level2-nofmt" in groups
    known = {r.get("group") for r in results.records()}
    assert groups <= known, groups - known
    for record in results.records():
        if results._is_card(record):  # a run card carries its own
            card = json.loads((results.RESULTS / record["file"]).read_text())
            assert card["created"] and card["machine"] and card["argv"], record["id"]
            continue
        assert record.get("date") and record.get("machine") and record.get("command"), record["id"]
        if "file" in record:
            assert (results.RESULTS / record["file"]).exists(), record["file"]


def test_card_groups_show_each_val_curve() -> None:
    """A group of run cards renders each card's val points (and the training minutes of
    cards that record them) and a PNG of them, built with the site."""
    from tools.docsgen import results

    for group in results.curve_groups():
        rendered = results.render_group(group)
        assert f"](curves/{group}.png)" in rendered
        for record in results.records():
            if record.get("group") != group or not results._is_card(record):
                continue
            card = json.loads((results.RESULTS / record["file"]).read_text())
            for e in results._val_points(card):
                point = f"{e['figures']['success_rate']:.3f} at v{e['pinned_version']}"
                if "train_seconds" in e:
                    point += f" ({e['train_seconds'] / 60:.1f} min)"
                assert point in rendered, (record["id"], point)
        assert results.curve_png(group).startswith(b"\x89PNG\r\n\x1a\n")
