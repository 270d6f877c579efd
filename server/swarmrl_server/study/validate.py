"""Checks a study file against the server it will run: the schema first, then every
command template and variation through `swarmrl serve`'s own flag parser and the trainer's
option parser (`commands.check_server`), so a study the server would refuse is refused
before anything starts. Its own module because it sits above both `schema` (the file's
shape) and `commands` (how runs are launched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from swarmrl_server.study.commands import check_server, check_template
from swarmrl_server.study.schema import Study, StudyError, Value, key_path


def parse_study(data: Any, *, where: str = "", deep: bool = True) -> Study:
    """A validated Study; raises StudyError naming each offending key. `deep` also runs
    every variation through the server's and the trainer's own parsers (the trainer's
    imports verl: seconds, so `status` and `report` skip it)."""
    try:
        study = Study.model_validate(data)
    except ValidationError as exc:
        lines = [f"{key_path(e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise StudyError(f"{where}{'; '.join(lines)}") from None
    check_template(study)
    if deep:
        check_overrides(study, {}, "server")
    for loc, variation in variation_locations(study):
        check_overrides(study, variation, loc, deep=deep)
    return study


def load_study(path: Path, *, deep: bool = True) -> Study:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise StudyError(f"{path}: cannot read the study: {exc}") from None
    return parse_study(data, where=f"{path}: ", deep=deep)


def variation_locations(study: Study) -> list[tuple[str, dict[str, Value]]]:
    """Each key of the grid (one value at a time) and each list item, with its key path."""
    out: list[tuple[str, dict[str, Value]]] = []
    for key, values in study.variations.grid.items():
        out += [(f"variations.grid.{key}[{i}]", {key: v}) for i, v in enumerate(values)]
    out += [(f"variations.list[{i}]", item) for i, item in enumerate(study.variations.items)]
    return out


def check_overrides(study: Study, overrides: dict[str, Value], where: str, *,
                    deep: bool = True) -> None:
    """Refuses unknown override keys and values the server or trainer would refuse."""
    clients = {c.name for c in study.clients}
    for key, value in overrides.items():
        kind, _, rest = key.partition(".")
        path = f"{where}.{key}" if where else key
        if kind == "client":
            name, _, arg = rest.partition(".")
            if name not in clients or not arg:
                raise StudyError(f"{path}: expected client.NAME.ARG with NAME one of "
                                 f"{sorted(clients)}")
        elif kind == "train":
            if not rest or isinstance(value, list):
                raise StudyError(f"{path}: expected train.KEY with one value")
        elif kind == "server":
            if not rest:
                raise StudyError(f"{path}: expected server.FLAG")
        else:
            raise StudyError(f"{path}: unknown override key; expected train.KEY, "
                             "server.FLAG or client.NAME.ARG")
    if deep:
        check_server(study, overrides, where)
