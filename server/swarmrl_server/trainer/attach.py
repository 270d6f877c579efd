"""Attaches a trainer to every trainable model of a started swarm (`swarmrl serve --train`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError, options_per_model
from swarmrl_server.trainer.trainer import Trainer

if TYPE_CHECKING:
    from swarmrl_server.config import ServerConfig
    from swarmrl_server.swarm import Swarm


async def attach_trainers(swarm: Swarm, config: ServerConfig) -> None:
    """Parses the train options (a bad one stops start-up with the valid choices listed),
    then starts one trainer per trainable model, resuming from `config.resume` if set."""
    per_model = options_per_model(config.train_options, list(swarm.models))
    for name, options in per_model.items():
        workers = TrainerConfig.from_options(options).workers
        if workers > 1 and not config.ray:
            raise TrainerConfigError(
                f"model {name}: workers={workers} places FSDP2 workers with Ray: add --ray "
                "(and --ray-address for an existing cluster)")
    for host in swarm.models.values():
        if not host.trainable:
            continue
        trainer = Trainer(swarm, host, TrainerConfig.from_options(per_model[host.name]))
        await trainer.start(resume=config.resume)
        host.trainer = trainer
