"""Naming an environment on the command line: ``ENV`` of ``swarmrl train`` / ``swarmrl eval``.

Three forms:

- ``package.module:attr`` or ``path/to/file.py:attr``: a Python object. `attr` is an
  `Environment` instance, or a class or function that returns one (called with the
  ``--env-arg`` values as keyword arguments);
- ``verifiers:ID``: a verifiers environment, loaded as verifiers' own loader loads it
  (`swarmrl.envs.verifiers`);
- ``openenv:SPEC``: an OpenEnv environment (`swarmrl.envs.openenv`).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swarmrl.envs._api import Environment

__all__ = ["load_environment", "parse_env_args"]


def parse_env_args(pairs: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs; a value that parses as JSON is taken as JSON (``level=2`` is an
    int, ``tasks=["a","b"]`` a list), any other as a string."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--env-arg {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def _python_object(spec: str) -> Any:
    where, sep, attr = spec.rpartition(":")
    if not sep or not where or not attr:
        raise ValueError(f"environment {spec!r}: expected MODULE:ATTR, FILE.py:ATTR, "
                         "verifiers:ID or openenv:SPEC")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ValueError(f"environment {spec!r}: no file {path}")
        name = f"_swarmrl_env_{path.stem}"
        module_spec = importlib.util.spec_from_file_location(name, path)
        assert module_spec is not None and module_spec.loader is not None
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[name] = module
        module_spec.loader.exec_module(module)
    else:
        # As uvicorn and gunicorn do (`--app-dir`, default "."): a console script's
        # sys.path lacks the working directory, where a user's module usually lives.
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        module = importlib.import_module(where)
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"environment {spec!r}: {where} has no attribute {attr!r}") from None


def load_environment(spec: str, args: Mapping[str, Any] | None = None) -> Environment:
    """The environment `spec` names, built with `args` (see the module docstring)."""
    args = dict(args or {})
    kind, _, rest = spec.partition(":")
    if kind in ("verifiers", "openenv") and rest:
        adapter = importlib.import_module(f"swarmrl.envs.{kind}")
        env = adapter.load(rest, **args)
        if not isinstance(env, Environment):
            raise TypeError(f"swarmrl.envs.{kind}.load gave {type(env).__name__}")
        return env
    obj = _python_object(spec)
    if isinstance(obj, Environment):
        if args:
            raise ValueError(f"environment {spec!r} is an instance: it takes no --env-arg")
        return obj
    if callable(obj):
        env = obj(**args)
        if isinstance(env, Environment):
            return env
        raise TypeError(f"environment {spec!r}: calling it gave {type(env).__name__}, "
                        "not a swarmrl.envs.Environment")
    raise TypeError(f"environment {spec!r} is a {type(obj).__name__}, not an Environment "
                    "or a factory of one")
