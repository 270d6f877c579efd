"""`swarmrl serve`: the command line of the swarm server."""

from __future__ import annotations

import argparse
import asyncio
import os
from pathlib import Path

from swarmrl_server.config import PAUSE_WAIT_S, ModelSpec, ServerConfig, with_engines
from swarmrl_server.engine.registry import engine_kind, engine_names

EPILOG = """\
examples:
  swarmrl serve --model tiny                      # a tiny model built offline, on 127.0.0.1:50051
  swarmrl serve --model smollm2 --data-dir runs/a # SmolLM2-135M-Instruct, episodes kept on disk
  swarmrl serve --model policy=./my-hf-model --model critic=tiny --port 0
  swarmrl serve --model tiny --engine vllm        # launches `vllm serve` on loopback for it
  swarmrl serve --model policy=tiny@vllm --model judge=tiny@hf   # an engine per model
  swarmrl serve --model policy=./m --engine vllm --engine-url http://10.0.0.5:8100
                                                  # attach to vLLM servers you run
  swarmrl serve --model tiny --engine echo        # no model time: front-door load tests

API keys can also come from the environment: SWARMRL_ADMIN_KEYS, SWARMRL_CLIENT_KEYS
(comma-separated).
"""


def build_parser(prog: str = "swarmrl serve") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a swarm server: host models, record episodes, train on them.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    # -- models
    p.add_argument("--model", action="append", metavar="[NAME=]SOURCE[@ENGINE]", default=None,
                   help="model to host: tiny, tiny:SEED, smollm2 or a directory, optionally "
                        "with its engine (repeatable; the first is the default)")
    p.add_argument("--cache-dir", type=Path, help="where built models are cached")
    p.add_argument("--engine", choices=engine_names(), default="hf",
                   help="engine for models whose spec names none (SOURCE@ENGINE): "
                        + ", ".join(f"{n} ({engine_kind(n).summary})" for n in engine_names()))
    p.add_argument("--engine-url", action="append", default=[], metavar="[NAME=]URL",
                   help="attach the vllm model NAME (default: the first vllm model) to a "
                        "running vLLM server instead of launching one (repeatable)")
    p.add_argument("--vllm-python", type=Path,
                   help="python of the venv with vLLM for launched servers "
                        "(default: $SWARMRL_VLLM_PYTHON, else .venv-vllm/bin/python beside "
                        "the swarmrl checkout, else ./.venv-vllm/bin/python)")
    # -- network
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback)")
    p.add_argument("--port", type=int, default=50051, help="gRPC port, 0 = any free port")
    p.add_argument("--http-port", type=int, default=8000,
                   help="OpenAI-compatible HTTP port, 0 = any free port, -1 = off")
    p.add_argument("--tls-cert", type=Path, help="PEM certificate chain (enables TLS for gRPC and HTTP)")
    p.add_argument("--tls-key", type=Path, help="PEM private key")
    p.add_argument("--admin-key", action="append", default=[],
                   help="API key with admin role (NAME=KEY binds it to principal NAME)")
    p.add_argument("--client-key", action="append", default=[],
                   help="API key with client role (NAME=KEY binds it to principal NAME)")
    # -- storage
    p.add_argument("--data-dir", type=Path,
                   help="keep episodes, checkpoints and logs here (default: memory only)")
    # -- generation
    p.add_argument("--max-batch-size", type=int, default=32, help="generations batched together")
    p.add_argument("--torch-threads", type=int,
                   help="intra-op threads for torch (default: half the CPU cores)")
    p.add_argument("--default-max-tokens", type=int, default=256)
    p.add_argument("--max-inflight", type=int, default=512,
                   help="most generations per model at once; more are told to retry later")
    p.add_argument("--pause-wait", type=float, default=PAUSE_WAIT_S, metavar="SECONDS",
                   help="how long a call made while its model's generation is paused (admin "
                        "pause, weight sync, trainer back-pressure) waits for the pause to "
                        "lift before it is refused (gRPC UNAVAILABLE, HTTP 429 + Retry-After); "
                        "0 refuses at once (default: %(default)s)")
    p.add_argument("--force-temperature", type=float,
                   help="sample every generation at this temperature (reported as an override)")
    p.add_argument("--grace", type=float, default=5.0, help="seconds calls may finish on shutdown")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"), help="server log level")
    # -- training
    p.add_argument("--train", action="store_true", help="train the models on ended episodes")
    p.add_argument("--train-option", action="append", default=[], metavar="KEY=VALUE",
                   help="trainer setting, e.g. lr=1e-5, adv_estimator=rloo, policy_loss=gspo, "
                        "batch_rule=groups (repeatable); MODEL.KEY=VALUE sets one model's; "
                        "'--train-option help' lists them all")
    p.add_argument("--resume", type=Path, help="resume training from this checkpoint directory")
    p.add_argument("--ray", action="store_true",
                   help="place engine replicas and trainer workers as Ray actors")
    p.add_argument("--ray-address", metavar="ADDR",
                   help="Ray cluster to join (implies --ray; default: start a local one)")
    p.add_argument("--replicas", type=int, default=1,
                   help="engine replicas per model (needs --ray), behind a sticky router")
    return p


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    def env_keys(name: str) -> tuple[str, ...]:
        return tuple(k for k in os.environ.get(name, "").split(",") if k)

    options = {}
    for item in args.train_option:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--train-option {item!r}: expected KEY=VALUE")
        options[key] = value
    try:
        specs = tuple(ModelSpec.parse(m) for m in (args.model or ["tiny"]))
        models = with_engines(specs, args.engine, args.engine_url)
    except ValueError as exc:
        raise SystemExit(f"swarmrl serve: error: {exc}") from None
    return ServerConfig(
        models=models, vllm_python=args.vllm_python,
        host=args.host, port=args.port,
        http_port=None if args.http_port < 0 else args.http_port,
        data_dir=args.data_dir, cache_dir=args.cache_dir,
        admin_keys=tuple(args.admin_key) + env_keys("SWARMRL_ADMIN_KEYS"),
        client_keys=tuple(args.client_key) + env_keys("SWARMRL_CLIENT_KEYS"),
        tls_cert=args.tls_cert, tls_key=args.tls_key,
        max_batch_size=args.max_batch_size, torch_threads=args.torch_threads,
        max_inflight=args.max_inflight, pause_wait_s=args.pause_wait,
        default_max_tokens=args.default_max_tokens,
        force_temperature=args.force_temperature, grace_s=args.grace,
        train=args.train, train_options=options, resume=args.resume,
        ray=args.ray or bool(args.ray_address), ray_address=args.ray_address,
        replicas=args.replicas,
    )


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    from swarmrl_server.logs import configure as configure_logs

    configure_logs(args.log_level)  # JSON lines unless stderr is a terminal
    from swarmrl_server.limits import return_large_buffers_to_the_os

    return_large_buffers_to_the_os()
    if "help" in args.train_option:
        from swarmrl_server.trainer.config import describe_options

        print(describe_options())
        return
    config = config_from_args(args)
    if config.train:  # a bad train option fails here, before any model loads
        from swarmrl_server.trainer.config import TrainerConfigError, options_per_model

        try:
            options_per_model(config.train_options, [m.name for m in config.models])
        except TrainerConfigError as exc:
            raise SystemExit(f"swarmrl serve: error: {exc}") from None
    from swarmrl_server.heap import long_lived

    with long_lived():  # (a forked server finds them imported: swarmrl_server.launch_preload)
        from swarmrl_server.app import serve  # heavy imports (torch) after --help
    asyncio.run(serve(config))


if __name__ == "__main__":
    main()
