"""Results and performance tables, rendered from the committed records under `results/`.

`results/index.yaml` and `results/performance.yaml` list the records. A record is either
a file a run wrote (`file:`; today the examples' `summary.json`, a study's report) or a
transcribed table (`columns` + `rows`) or printed output (`output`). A page asks for a
group of records with a `<!-- records: GROUP -->` line, which becomes one table for the
group's summary files (a row per record) or the group's tables, each followed by its date,
machine and command.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from tools.docsgen import REPO, cell, table

RESULTS = REPO / "results"
MARKER = re.compile(r"^<!-- records: ([\w.-]+) -->$", re.M)


def records() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for index in ("index.yaml", "performance.yaml"):
        data = yaml.safe_load((RESULTS / index).read_text())
        found += [dict(record) for record in data["records"]]
    machines = yaml.safe_load((RESULTS / "index.yaml").read_text()).get("machines", {})
    for record in found:
        name = str(record.get("machine", ""))
        head, _, rest = name.partition(" ")
        record["machine"] = machines.get(head, head) + (f" {rest}" if rest else "")
    return found


def _rate(part: dict[str, Any]) -> str:
    low, high = part.get("wilson95", [None, None])
    ci = f", {low:.3f}–{high:.3f}" if low is not None else ""
    return f"{part['rate']:.3f} ({part['solved']}/{part['n']}{ci})"


def _summary_row(record: dict[str, Any], data: dict[str, Any]) -> list[object]:
    before, after = data["before"], data["after"]
    gain = data.get("gain", after["rate"] - before["rate"])
    times = f" ({after['rate'] / before['rate']:.1f}×)" if before["rate"] else ""
    merge = data.get("merge", {}).get("trained", {})
    ratio = f"{merge['token_ratio']:.2f}×" if merge.get("token_ratio") else ""
    return [record.get("title", record["id"]), _rate(before), _rate(after), f"{gain:+.3f}{times}",
            data.get("train_steps", ""), data.get("train_episodes", ""),
            f"{data['train_s'] / 60:.0f} min" if "train_s" in data else "", ratio,
            f"[{record['file']}]({_link(record['file'])})"]


def _link(path: str) -> str:
    """Where the record is published in the site (the hook copies `results/` there), seen
    from a page in `docs/results/`."""
    return f"{PUBLISHED}/{path}"


PUBLISHED = "records"


def _provenance(record: dict[str, Any]) -> str:
    parts = [f"**{record['date']}**", str(record.get("machine", ""))]
    if record.get("source"):
        parts.append(str(record["source"]))
    if record.get("note"):
        parts.append(str(record["note"]))
    return "; ".join(p for p in parts if p) + ".\n\n```sh\n" + str(record.get("command", "")) + "\n```\n"


def _figure(figures: dict[str, Any] | None) -> str:
    if not figures or figures.get("success_rate") is None:
        return ""
    low, high = figures["success_ci95"]
    return f"{figures['success_rate']:.3f} ({figures['solved']}/{figures['n']}, {low:.3f}–{high:.3f})"


def _card_rows(cards: list[dict[str, Any]]) -> str:
    """Run cards (``swarmrl train``): val before, the selected checkpoint's val, test once."""
    rows = []
    for r in cards:
        card = json.loads((RESULTS / r["file"]).read_text())
        vals = [e for e in card.get("evals", []) if e["split"] == "val"]
        selected = card.get("selected", {})
        test = card.get("test") or next(
            (e for e in card.get("evals", []) if e["split"] == "test"), {})
        rows.append([r.get("title", r["id"]), _figure(vals[0]["figures"] if vals else None),
                     f"{selected['name']}: {_figure(selected.get('val_figures'))}"
                     if selected else "",
                     _figure(test.get("figures")), f"v{test.get('pinned_version', '')}",
                     card.get("train", {}).get("groups", ""),
                     f"{card.get('wall_s', 0) / 60:.0f} min",
                     f"[{r['file']}]({_link(r['file'])})"])
    out = [table(["run", "val before", "selected by val", "test, once (95% CI)",
                  "test version", "groups trained", "wall time", "card"], rows)]
    out.append(f"![val success of each run](curves/{cards[0]['group']}.png)\n")
    for r in cards:
        card = json.loads((RESULTS / r["file"]).read_text())
        points = ", ".join(
            f"{e['figures']['success_rate']:.3f} at v{e['pinned_version']}"
            + (f" ({e['train_seconds'] / 60:.1f} min)" if "train_seconds" in e else "")
            for e in _val_points(card))
        out.append(f"*{cell(r.get('title', r['id']))}*, {card['created']}, "
                   + (f"val success: {points}; " if points else "")
                   + f"{card['machine'].get('cpus')} CPUs, commit "
                   f"{card.get('git', {}).get('commit', '?')[:10]}:\n\n"
                   f"```sh\nswarmrl {' '.join(card['argv'])}\n```\n")
    return "\n".join(out)


def _is_card(record: dict[str, Any]) -> bool:
    """Whether a record is a run card (``swarmrl train`` / ``eval``, under ``cards/``)."""
    return str(record.get("file", "")).startswith("cards/")


def _val_points(card: dict[str, Any]) -> list[dict[str, Any]]:
    """A card's val evaluations with a success rate, in the order they were played."""
    return [e for e in card.get("evals", [])
            if e["split"] == "val" and e["figures"].get("success_rate") is not None]


def curve_groups() -> list[str]:
    """The groups with run cards: each gets a val-curve figure (`curve_png`)."""
    return sorted({str(r["group"]) for r in records() if _is_card(r) and r.get("group")})


def curve_png(group: str) -> bytes:
    """Val success of each train card of `group` against training minutes (cards that
    record `train_seconds`), else against the policy version evaluated."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cards = [(r, json.loads((RESULTS / r["file"]).read_text())) for r in records()
             if r.get("group") == group and _is_card(r)]
    cards = [(r, c) for r, c in cards if len(_val_points(c)) > 1]
    by_time = bool(cards) and all("train_seconds" in e for _, c in cards for e in _val_points(c))
    fig, ax = plt.subplots(figsize=(6, 3.4), dpi=100)
    for r, card in cards:
        points = _val_points(card)
        xs = [e["train_seconds"] / 60 if by_time else e["pinned_version"] for e in points]
        ax.plot(xs, [e["figures"]["success_rate"] for e in points], marker="o",
                label=str(r.get("title", r["id"])))
    ax.set_xlabel("training minutes" if by_time else "policy version")
    ax.set_ylabel("val success")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if cards:
        ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def render_group(group: str) -> str:
    members = [r for r in records() if r.get("group") == group]
    if not members:
        raise ValueError(f"no record in results/ has group {group!r}")
    out: list[str] = []
    cards = [r for r in members if _is_card(r)]
    if cards:
        out.append(_card_rows(cards))
        members = [r for r in members if r not in cards]
    summaries = [r for r in members if str(r.get("file", "")).endswith(".json")]
    if summaries:
        rows = [_summary_row(r, json.loads((RESULTS / r["file"]).read_text())) for r in summaries]
        out.append(table(["run", "held-out before", "after (95% CI)", "gain", "steps",
                          "training episodes", "training time", "merge (tokens as calls / as timelines)",
                          "record"], rows))
        dates = sorted({str(r["date"]) for r in summaries})
        out.append(f"Measured {', '.join(dates)} on {summaries[0]['machine']}.\n")
        for r in summaries:
            out.append(f"*{cell(r.get('title', r['id']))}*:\n\n```sh\n{r['command']}\n```\n")
    for r in members:
        if r in summaries:
            continue
        out.append(f"**{cell(r['title'])}**\n")
        if "columns" in r:
            out.append(table([str(c) for c in r["columns"]], r["rows"]))
        if "output" in r:
            out.append("```text\n" + str(r["output"]).rstrip() + "\n```\n")
        if str(r.get("file", "")).endswith(".md"):
            text = (RESULTS / r["file"]).read_text()
            text = re.sub(r"^!\[.*$\n?", "", text, flags=re.M)  # its figures were not kept
            text = re.sub(r"^## Curves\n+", "", text, flags=re.M)
            text = re.sub(r"^(#+) ", lambda m: "#" * (len(m[1]) + 2) + " ", text, flags=re.M)
            out.append(text.strip() + "\n")
            out.append(f"Record: `results/{r['file']}` in the repository.\n")
        out.append(_provenance(r))
    return "\n".join(out)


def expand(markdown: str) -> str:
    """Replace every `<!-- records: GROUP -->` line with the group's rendered records."""
    return MARKER.sub(lambda m: render_group(m[1]), markdown)


def used_groups(docs: Path) -> set[str]:
    return {m[1] for page in docs.rglob("*.md") for m in MARKER.finditer(page.read_text())}
