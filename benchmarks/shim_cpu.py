"""Server CPU per shim call, in process: source trees side by side, alternated.

`shim_load.py` reads the server's CPU from /proc while a load generator shares the
cores; on a machine other jobs load, that figure swings by ±30 % between repeats of one
tree. Here each run is one process with nothing else in it: a `swarmrl_server` of the
tree (echo engine, the real store on a temporary data dir) and its shim's ASGI app, called
directly (no sockets, no uvicorn: what is left is the app, the call path, the engine and
the store), C callers each playing 8-turn chat episodes, a key each. The figure is the
process's CPU time per call (its threads included: the store's writer too), which moves
least with other work on the machine; the callers' own part (building a body, reading
the JSON) is the same for every tree.

    git worktree add --detach /tmp/bench-base BASE
    python benchmarks/shim_cpu.py --trees base=/tmp/bench-base this=. --repeats 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TURNS = 8


async def one_run(c: int, n_calls: int, cache_dir: str) -> dict[str, float]:
    from swarmrl_server.app import start_server
    from swarmrl_server.config import ModelSpec, ServerConfig
    from swarmrl_server.http.app import build_app
    from swarmrl_server.logs import configure
    from swarmrl_server.security import IN_PROCESS

    configure("info")
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        config = ServerConfig(models=(ModelSpec("tiny", "tiny", "echo"),), port=0,
                              http_port=None, data_dir=Path(tmp) / "data",
                              cache_dir=Path(cache_dir), grace_s=0.5)
        running = await start_server(config)
        swarm = running.swarm
        app = build_app(swarm)
        await swarm.sessions.open("bench", "shim_cpu", 3600, caller=IN_PROCESS)

        async def call(key: str, body: bytes) -> dict[str, Any]:
            headers = [(b"host", b"bench"), (b"authorization", b"Bearer " + key.encode()),
                       (b"content-type", b"application/json"),
                       (b"content-length", str(len(body)).encode())]
            scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                     "method": "POST", "scheme": "http", "path": "/v1/chat/completions",
                     "raw_path": b"/v1/chat/completions", "query_string": b"",
                     "root_path": "", "client": ("127.0.0.1", 1),
                     "server": ("127.0.0.1", 2), "headers": headers}
            received, done, chunks, status = False, asyncio.Event(), [], [0]

            async def receive() -> dict[str, Any]:
                nonlocal received
                if not received:
                    received = True
                    return {"type": "http.request", "body": body, "more_body": False}
                await done.wait()  # as uvicorn: a disconnect only once the response is sent
                return {"type": "http.disconnect"}

            async def send(message: dict[str, Any]) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                elif message["type"] == "http.response.body":
                    chunks.append(message.get("body", b""))
                    if not message.get("more_body"):
                        done.set()

            await app(scope, receive, send)
            assert status[0] == 200, (status[0], b"".join(chunks)[:300])
            return json.loads(b"".join(chunks))  # type: ignore[no-any-return]

        async def caller(w: int, episodes: int) -> int:
            made = 0
            for e in range(episodes):
                _, key = await swarm.episodes.start(
                    session_id="bench", task_id=f"t{w}", group_id="", agent_version="",
                    models=[], request_id="", labels={}, caller=IN_PROCESS)
                messages = [{"role": "user", "content": f"caller {w}, episode {e}: a story"}]
                for t in range(TURNS):
                    out = await call(key, json.dumps({
                        "model": "tiny", "messages": messages, "max_tokens": 16,
                        "temperature": 1.0}).encode())
                    reply = out["choices"][0]["message"]["content"]
                    messages = [*messages, {"role": "assistant", "content": reply},
                                {"role": "user", "content": f"turn {t}: and then?"}]
                    made += 1
            return made

        await caller(-1, 2)  # a server's first calls import what they need lazily
        t0, cpu0 = time.perf_counter(), time.process_time()
        made = sum(await asyncio.gather(*(caller(w, max(1, n_calls // (TURNS * c)))
                                          for w in range(c))))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        await running.stop()
    return {"calls": made, "cpu_ms": 1e3 * cpu / made, "wall_ms": 1e3 * wall / made}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trees", nargs="+", default=[f"this={Path(__file__).parent.parent}"],
                   help="NAME=PATH of each source tree (the first is the baseline)")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 64])
    p.add_argument("--calls", type=int, default=768)
    p.add_argument("--repeats", type=int, default=3, help="alternations of the trees")
    p.add_argument("--cache-dir", default=os.environ.get(
        "SWARMRL_CACHE", str(Path.home() / ".cache" / "swarmrl")))
    p.add_argument("--child", nargs=2, type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(one_run(*args.child, args.cache_dir))))
        return
    trees = [(n, Path(t).resolve()) for n, _, t in (s.partition("=") for s in args.trees)]
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    print(f"{os.cpu_count()} cores; in process, echo engine, {TURNS}-turn chat episodes; "
          "server CPU ms per call (process CPU time)")
    for r in range(args.repeats):
        for name, tree in trees:
            for c in args.concurrency:
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                    [str(tree / "server"), str(tree / "sdk_python"), str(tree)])}
                out = subprocess.run(
                    [sys.executable, __file__, "--child", str(c), str(args.calls),
                     "--cache-dir", args.cache_dir],
                    env=env, capture_output=True, text=True, check=True)
                run = json.loads(out.stdout.strip().splitlines()[-1])
                runs.setdefault((name, c), []).append(run)
                print(f"  repeat {r + 1} {name:<8} c={c:<4} {run['calls']:>5} calls  "
                      f"cpu {run['cpu_ms']:.3f} ms/call  wall {run['wall_ms']:.3f}", flush=True)
    print("medians")
    base = trees[0][0]
    for c in args.concurrency:
        b = statistics.median(x["cpu_ms"] for x in runs[(base, c)])
        for name, _ in trees:
            m = statistics.median(x["cpu_ms"] for x in runs[(name, c)])
            print(f"  {name:<8} c={c:<4} cpu {m:.3f} ms/call  x{m / b:.3f} of {base}")


if __name__ == "__main__":
    main()
