"""``swarmrl top``: a live terminal view of a swarm server, drawn with rich.

Read-only, all from the gRPC admin API: ``GetStatus`` (server state, models and their
policy versions, holds of training: holder, reason, age), ``ListClients`` (live clients and agent versions) and
``GetLiveSnapshot`` (trainer progress per task, open episodes, call and token totals,
recent errors; the HTTP shim serves the same message as JSON at ``/swarmrl/live``).
Rates (calls/s, tokens/s) are the totals' change between two polls.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from swarmrl._config import DEFAULT_TARGET, ClientConfig
from swarmrl._errors import SwarmError
from swarmrl._retry import RetryPolicy
from swarmrl._sync import SwarmClient
from swarmrl._types import ClientList, ServerStatus

DEFAULT_HTTP = "http://127.0.0.1:8000"
MAX_ROWS = 15


@dataclass
class Sample:
    """One poll of the admin API."""

    at: float
    status: ServerStatus
    clients: ClientList
    live: dict[str, Any]
    """The live snapshot (GetLiveSnapshot, as GET /swarmrl/live's JSON); {} when the
    server refused it."""
    live_error: str = ""


def poll(client: SwarmClient) -> Sample:
    status = client.status()
    clients = client.list_clients()
    try:
        live, error = client.live_snapshot(), ""
    except SwarmError as err:  # e.g. a key without the admin role
        live, error = {}, f"GetLiveSnapshot: {err}"
    return Sample(time.monotonic(), status, clients, live, error)


def _age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f}s"
    if seconds < 3600:
        return f"{seconds / 60:.1f}m"
    return f"{seconds / 3600:.1f}h"


def _rates(prev: Sample | None, cur: Sample) -> tuple[float, float]:
    """(calls/s, completion tokens/s) between two polls."""
    if prev is None or not prev.live or not cur.live or cur.at <= prev.at:
        return 0.0, 0.0
    if prev.live.get("server_instance") != cur.live.get("server_instance"):
        return 0.0, 0.0  # restarted: the totals started over
    dt = cur.at - prev.at
    a, b = prev.live["totals"], cur.live["totals"]
    return (b["calls"] - a["calls"]) / dt, (b["completion_tokens"] - a["completion_tokens"]) / dt


def render(target: str, prev: Sample | None, cur: Sample) -> Any:
    """The whole screen as one rich renderable."""
    from rich.console import Group
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    st, live = cur.status, cur.live
    state = "paused" if st.paused else "serving"
    if live.get("paused"):
        state += f" ({live['paused']})"
    calls_s, tokens_s = _rates(prev, cur)
    header = Text.assemble(
        ("swarmrl top  ", "bold"), f"{target}  instance {st.server_instance[:12]}  ",
        ("state ", "dim"), (state, "yellow" if st.paused else "green"),
        ("  sessions ", "dim"), str(st.sessions), ("  holds ", "dim"), str(len(st.holds)),
        ("  episodes ", "dim"),
        f"{st.open_episodes} open / {st.ended_episodes} ended / {st.aborted_episodes} aborted",
        ("  calls/s ", "dim"), f"{calls_s:.1f}", ("  tokens/s ", "dim"), f"{tokens_s:.1f}",
    )
    parts: list[Any] = [header]
    if cur.live_error:
        parts.append(Text(f"live view unavailable: {cur.live_error}", style="red"))

    live_models = {m["name"]: m for m in live.get("models", [])}
    models = Table(title="models", title_justify="left", expand=True)
    for col in ("MODEL", "VERSION", "TRAINABLE", "INFLIGHT", "WAITING", "STEP", "PENDING",
                "REWARD", "LOSS", "STEP TIME"):
        models.add_column(col)
    batches = Table(title="batch progress", title_justify="left", expand=True)
    for col in ("MODEL", "TASK", "PENDING", "BATCH"):
        batches.add_column(col)
    for m in st.models:
        lm = live_models.get(m.name, {})
        tr = lm.get("trainer") or {}
        last = tr.get("last", {})
        step = ""
        if tr:
            step = f"{tr['step']}" + (f"/{tr['max_steps']}" if tr.get("max_steps") else "")
            if tr.get("error"):
                step += " FAILED"
        models.add_row(
            m.name, str(m.policy_version), "yes" if m.trainable else "no",
            str(lm.get("inflight", "")), str(lm.get("engine_waiting") or 0) if lm else "",
            step, str(tr.get("pending", "")),
            f"{last['reward/mean']:.3f}" if "reward/mean" in last else "",
            f"{last['loss/total']:.4f}" if "loss/total" in last else "",
            f"{last['time/step_s']:.2f}s" if "time/step_s" in last else "",
        )
        if tr:
            unit = "groups" if tr["batch_rule"] in ("groups", "varied_groups") else "episodes"
            batch = f"{tr['batch_size']} {unit} ({tr['batch_rule']})"
            for task in tr.get("tasks") or [{"task_id": "-", "pending": 0}]:
                batches.add_row(m.name, task["task_id"], str(task["pending"]), batch)
    now = time.time()
    holds = Table(title="training holds", title_justify="left", expand=True)
    for col in ("MODEL", "HOLDER", "REASON", "SESSION", "AGE", "LAPSES IN"):
        holds.add_column(col)
    for h in st.holds[:MAX_ROWS]:
        left = h.lease_expire_time.timestamp() - now if h.lease_expire_time else 0.0
        holds.add_row(h.model, h.holder, h.reason, h.session_id or "(own lease)", _age(h.age),
                      _age(left))
    parts += [models, batches, holds]

    clients = Table(title="clients", title_justify="left", expand=True)
    for col in ("SESSION", "CLIENT", "AGENT VERSIONS", "TASKS", "OPEN", "ENDED", "ABORTED",
                "LEASE LEFT"):
        clients.add_column(col)
    for c in cur.clients.clients[:MAX_ROWS]:
        versions = [v for v in dict.fromkeys([c.agent_version, *c.episode_agent_versions]) if v]
        lease = c.lease_expire_time.timestamp() - now if c.lease_expire_time else 0.0
        clients.add_row(c.session_id, c.client_name, ", ".join(versions),
                        ", ".join(c.tasks[:5]) + (" …" if len(c.tasks) > 5 else ""),
                        str(c.open_episodes), str(c.ended_episodes), str(c.aborted_episodes),
                        _age(lease))
    versions_table = Table(title="agent versions", title_justify="left", expand=True)
    for col in ("AGENT VERSION", "OPEN", "ENDED", "ABORTED", "TRAINED", "MEAN REWARD"):
        versions_table.add_column(col)
    for v in cur.clients.agent_versions[:MAX_ROWS]:
        versions_table.add_row(v.agent_version or "(none)", str(v.open_episodes),
                               str(v.ended_episodes), str(v.aborted_episodes),
                               str(v.consumed_episodes), f"{v.mean_reward:.3f}")
    episodes = Table(title="open episodes (longest idle first)", title_justify="left",
                     expand=True)
    for col in ("EPISODE", "TASK", "AGENT", "MODELS", "CALLS", "IDLE", "AGE"):
        episodes.add_column(col)
    for e in sorted(live.get("open_episodes", []), key=lambda e: -e["idle_s"])[:MAX_ROWS]:
        episodes.add_row(e["episode_id"], e["task_id"], e["agent_version"],
                         ",".join(e["models"]), str(e["calls"]), _age(e["idle_s"]),
                         _age(e["age_s"]))
    errors = Table(title="recent errors", title_justify="left", expand=True)
    for col in ("TIME", "DOOR", "METHOD", "CODE", "MESSAGE"):
        errors.add_column(col)
    for err in list(reversed(live.get("errors", [])))[:MAX_ROWS]:
        errors.add_row(time.strftime("%H:%M:%S", time.localtime(err["time"])), err["door"],
                       err["method"], err["code"], err["message"][:80])
    parts += [clients, versions_table, episodes, errors]
    return Panel(Group(*parts), border_style="blue")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swarmrl top",
        description="Live console of a swarm server: models and policy versions, trainer "
                    "progress, holds of training, clients, open episodes, calls/s and "
                    "tokens/s, recent errors.",
        epilog="example:\n  swarmrl top --target 127.0.0.1:50051",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--target", default=os.environ.get("SWARMRL_TARGET", DEFAULT_TARGET),
                   help="gRPC address HOST:PORT (default: $SWARMRL_TARGET or %(default)s)")
    p.add_argument("--http", default=os.environ.get("SWARMRL_HTTP", DEFAULT_HTTP),
                   help="unused: the live view now comes over gRPC (GetLiveSnapshot); kept so "
                        "that older command lines still parse")
    p.add_argument("--api-key", default=os.environ.get("SWARMRL_API_KEY"),
                   help="API key (an admin key when the server has keys; default: $SWARMRL_API_KEY)")
    p.add_argument("--tls", action="store_true", help="connect to gRPC with TLS")
    p.add_argument("--interval", type=float, default=1.0, metavar="SECONDS",
                   help="refresh period (default: %(default)s)")
    p.add_argument("--wait", type=float, default=5.0, metavar="SECONDS",
                   help="how long to wait for an unreachable server (default: %(default)s)")
    p.add_argument("--once", action="store_true",
                   help="poll twice, one interval apart (for the rates), print once and exit")
    return p


def main(argv: Sequence[str] | None = None, *, console: Any = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        print("swarmrl top needs rich: pip install 'swarmrl[top]'", file=sys.stderr)
        return 2
    console = console or Console()
    config = ClientConfig(target=args.target, api_key=args.api_key or None, tls=args.tls,
                          retry=RetryPolicy(timeout=args.wait), call_timeout=max(args.wait, 1.0))
    try:
        with SwarmClient(config=config) as client:
            prev = poll(client)
            if args.once:
                time.sleep(args.interval)
                console.print(render(args.target, prev, poll(client)))
                return 0
            with Live(render(args.target, None, prev), console=console, screen=False,
                      auto_refresh=False) as view:
                while True:
                    time.sleep(args.interval)
                    cur = poll(client)
                    view.update(render(args.target, prev, cur), refresh=True)
                    prev = cur
    except SwarmError as err:
        print(f"swarmrl top: {args.target}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
