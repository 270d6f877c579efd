"""Runs a swarm server: loads models, starts gRPC (and the HTTP shim), stops gracefully."""

from __future__ import annotations

import asyncio
import signal
from dataclasses import dataclass

import grpc
import structlog
import torch

from swarmrl_server.config import ServerConfig, default_torch_threads
from swarmrl_server.engine.adapter import LoraSpec
from swarmrl_server.episodes.resolve import GenerationPolicy
from swarmrl_server.grpc.server import SwarmGrpcServer, create_server
from swarmrl_server.heap import long_lived
from swarmrl_server.hosting import ModelHost, load_hosts
from swarmrl_server.http.app import HttpServer, build_app
from swarmrl_server.security import KeyRing
from swarmrl_server.swarm import Swarm
from swarmrl_server.trainer.config import TrainerConfig, options_per_model
from swarmrl_server.trainer.lora import spec_for

log = structlog.get_logger("swarmrl.app")


def torch_threads(config: ServerConfig) -> int:
    return config.torch_threads or default_torch_threads()


def trainer_configs(config: ServerConfig) -> dict[str, TrainerConfig]:
    """Each trained model's trainer settings, parsed once from the train options (empty
    when the server does not train)."""
    if not config.train:
        return {}
    per_model = options_per_model(config.train_options, [m.name for m in config.models])
    return {name: TrainerConfig.from_options(o) for name, o in per_model.items()}


def lora_specs(trainers: dict[str, TrainerConfig]) -> dict[str, LoraSpec]:
    """The models trained with LoRA (train option lora_rank > 0) and their adapters: the
    host loader serves these as adapters of a base."""
    specs = {name: spec_for(t) for name, t in trainers.items()}
    return {name: spec for name, spec in specs.items() if spec is not None}


def ray_hosts(config: ServerConfig) -> dict[str, ModelHost]:
    """Engines as Ray actors behind a router (`swarmrl serve --ray`)."""
    from swarmrl_server.scale.cluster import init_ray
    from swarmrl_server.scale.replicas import RayPlacement

    trainers = trainer_configs(config)
    need = float(len(config.models) * config.replicas)
    need += sum(t.workers * t.worker_cpus for t in trainers.values() if t.workers > 1)
    init_ray(config.ray_address, logical_cpus=need)
    return load_hosts(config, RayPlacement(config.replicas, max(1, config.torch_threads or 1)),
                      loras=lora_specs(trainers), share_bases=False)


@dataclass
class RunningServer:
    """A server started by `start_server`; `stop()` shuts it down gracefully."""

    swarm: Swarm
    grpc: SwarmGrpcServer
    config: ServerConfig
    http: HttpServer | None = None
    """The OpenAI/Anthropic-compatible shim (None when config.http_port is None)."""

    @property
    def grpc_target(self) -> str:
        return f"{self.config.host}:{self.grpc.port}"

    @property
    def openai_base_url(self) -> str:
        """e.g. http://127.0.0.1:8000/v1 ("" without the shim)."""
        return self.http.openai_base_url if self.http else ""

    async def stop(self) -> None:
        await self.swarm.events.append("draining", grace_s=self.config.grace_s)
        # Both front doors drain at once; the engines stop only after both are closed.
        await asyncio.gather(
            self.grpc.stop(self.config.grace_s),
            *([self.http.stop()] if self.http else []),
        )
        await self.swarm.stop()


async def start_server(config: ServerConfig, hosts: dict[str, ModelHost] | None = None) -> RunningServer:
    """Starts everything `config` asks for; `hosts` overrides model loading (tests)."""
    torch.set_num_threads(torch_threads(config))
    if config.replicas < 1 or (config.replicas > 1 and not config.ray):
        raise ValueError(f"--replicas {config.replicas}: more than one replica needs --ray")
    if hosts is None:
        hosts = ray_hosts(config) if config.ray else load_hosts(config, loras=lora_specs(trainer_configs(config)))
    policy = GenerationPolicy(
        default_max_tokens=config.default_max_tokens, force_temperature=config.force_temperature,
        max_inflight=config.max_inflight, pause_wait_s=config.pause_wait_s,
    )
    swarm = Swarm(hosts, data_dir=config.data_dir, policy=policy)
    await swarm.start()
    if config.train:
        from swarmrl_server.trainer.workers import GroupFactory, LocalGroup
        from swarmrl_server.wiring import attach_trainers

        start_group: GroupFactory = LocalGroup
        if config.ray:  # more than one worker of a model become Ray actors
            from swarmrl_server.scale import workers

            start_group = workers.start_group
        try:
            await attach_trainers(swarm, config, start_group=start_group)
        except BaseException:
            await swarm.stop()  # engines too: a launched vLLM server must not outlive us
            raise
    tls = None
    if config.tls_cert or config.tls_key:
        if not (config.tls_cert and config.tls_key):
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        tls = grpc.ssl_server_credentials(
            [(config.tls_key.read_bytes(), config.tls_cert.read_bytes())]
        )
    keys = KeyRing(config.admin_keys, config.client_keys)
    http = None
    if config.http_port is not None:
        # Same process, same loop, same Swarm: HTTP calls land in the same episodes. It
        # starts first so that no StartEpisode can answer without the base URL.
        http = HttpServer(build_app(swarm, server_keys=keys), config.host, config.http_port,
                          grace_s=config.grace_s,
                          tls=(config.tls_cert, config.tls_key)
                          if config.tls_cert and config.tls_key else None)
        await http.start()
        swarm.openai_base_url = http.openai_base_url
    try:
        server = await create_server(swarm, f"{config.host}:{config.port}", keys=keys, tls=tls)
    except BaseException:
        if http is not None:
            await http.stop()
        raise
    return RunningServer(swarm, server, config, http)


async def serve(config: ServerConfig) -> None:
    """Runs until SIGINT/SIGTERM, then drains and stops."""
    with long_lived(collect=True):  # the app and its models live as long as the process
        running = await start_server(config)
    print(f"swarmrl serving gRPC on {running.grpc_target}", flush=True)
    if running.http is not None:
        print(f"swarmrl serving OpenAI-compatible HTTP on {running.openai_base_url} "
              f"(Anthropic: {running.http.base_url})", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting_down", grace_s=config.grace_s)
    await running.stop()
