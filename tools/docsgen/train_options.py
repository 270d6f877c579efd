"""The trainer's options, from its own table: what `swarmrl serve --train-option help`
prints (`swarmrl_server.trainer.config.describe_options`), parsed into rows."""

from __future__ import annotations

import re

from tools.docsgen import table

_OPTION = re.compile(r"^  (\w+)=(.*)$")


def parse(text: str) -> list[tuple[str, str, str]]:
    """(name, default, description) from `--train-option help`'s output."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        match = _OPTION.match(line)
        if match:
            rows.append([match[1], match[2], ""])
        elif rows and line.startswith("      "):
            rows[-1][2] = (rows[-1][2] + " " + line.strip()).strip()
    return [(n, d, h) for n, d, h in rows]


def options() -> list[tuple[str, str, str]]:
    from swarmrl_server.trainer.config import describe_options

    return parse(describe_options())


def render() -> str:
    rows: list[list[object]] = [[f"`{n}`", f"`{d}`", h] for n, d, h in options()]
    return (
        "# Train options\n\n"
        "`swarmrl serve --train --train-option KEY=VALUE` (repeatable) sets how a model is "
        "trained; `--train-option MODEL.KEY=VALUE` sets it for one hosted model only. "
        "Unknown keys, values of the wrong type and names verl's registries do not know stop "
        "start-up with the valid choices listed. Generated from the trainer's own option table "
        "(`swarmrl_server/trainer/config.py`), the one `swarmrl serve --train-option help` "
        "prints.\n\n" + table(["option", "default", "what it does"], rows)
    )
