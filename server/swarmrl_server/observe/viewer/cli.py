"""`swarmrl view`: the episode viewer, offline from a data dir (or where a server serves it).

A running server already serves the viewer at ``http://HOST:HTTP_PORT/view/``;
``swarmrl view --url http://HOST:PORT`` prints (and opens) that address.
``swarmrl view DATA_DIR`` serves it from a data dir, alone: it reads the store
(safely, even while a server writes to it) and decodes tokens with the tokenizer of
``--model NAME=SOURCE``, or else of the model's latest checkpoint in the data dir.
"""

from __future__ import annotations

import argparse
import webbrowser
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EPILOG = """\
examples:
  swarmrl view runs/demo/data                  # offline, tokenizer from the checkpoints
  swarmrl view runs/a/data --model tiny --port 8200
  swarmrl view --url http://127.0.0.1:8000     # the running server's own viewer
"""


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="swarmrl view", description="Token-level episode viewer in the browser.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data_dir", nargs="?", type=Path, help="a server's --data-dir")
    p.add_argument("--model", action="append", default=[], metavar="[NAME=]SOURCE",
                   help="tokenizer of a model: tiny, smollm2 or a directory (repeatable)")
    p.add_argument("--cache-dir", type=Path, help="where built models are cached")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=8100, help="port (default: %(default)s)")
    p.add_argument("--url", help="a running server's HTTP address: print its viewer's URL")
    p.add_argument("--open", action="store_true", help="open the page in a browser")
    return p


def latest_checkpoint(data_dir: Path, model: str) -> Path | None:
    root = data_dir / "checkpoints" / model
    steps = sorted(root.glob("step-*"), key=lambda p: int(p.name.split("-")[-1])
                   if p.name.split("-")[-1].isdigit() else -1)
    return steps[-1] if steps and (steps[-1] / "tokenizer_config.json").is_file() else None


async def open_source(data_dir: Path, models: Sequence[str], cache_dir: Path | None) -> Any:
    from transformers import AutoTokenizer

    from swarmrl_server.config import ModelSpec
    from swarmrl_server.models import resolve_model
    from swarmrl_server.observe.viewer.source import EpisodeSource
    from swarmrl_server.store.records import EpisodeState
    from swarmrl_server.store.sqlite import SqliteStore

    path = data_dir / "swarm.sqlite3"
    if not path.is_file():
        raise SystemExit(f"swarmrl view: no episodes in {data_dir} (no swarm.sqlite3)")
    store = SqliteStore(path)
    await store.open()
    dirs: dict[str, Path | None] = {}
    for text in models:
        spec = ModelSpec.parse(text)
        dirs[spec.name] = resolve_model(spec.source, cache_dir)
    seen = {m for s in EpisodeState for r in await store.list_episodes(s) for m in r.models}
    for name in sorted(seen - set(dirs)):
        dirs[name] = latest_checkpoint(data_dir, name)
    tokenizers = {n: AutoTokenizer.from_pretrained(d) for n, d in dirs.items() if d is not None}
    return EpisodeSource(store, tokenizers, dirs, label=f"offline: {data_dir}")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.url:
        url = f"{args.url.rstrip('/')}/view/"
        print(url)
        if args.open:
            webbrowser.open(url)
        return 0
    if args.data_dir is None:
        build_parser().error("give a DATA_DIR (offline) or --url (a running server)")
    import asyncio

    import uvicorn
    from fastapi import FastAPI

    from swarmrl_server.observe.viewer.web import attach_viewer

    async def serve() -> None:
        source = await open_source(args.data_dir, args.model, args.cache_dir)
        app = FastAPI(title="swarmrl viewer", docs_url=None, redoc_url=None)
        attach_viewer(app, source)
        url = f"http://{args.host}:{args.port}/view/"
        print(f"swarmrl view: serving {args.data_dir} on {url}", flush=True)
        if args.open:
            webbrowser.open(url)
        config = uvicorn.Config(app, host=args.host, port=args.port, log_level="warning")
        try:
            await uvicorn.Server(config).serve()
        finally:
            await source.store.close()

    asyncio.run(serve())
    return 0
