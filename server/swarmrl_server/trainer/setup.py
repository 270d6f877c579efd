"""Attaches a trainer to every trainable model of a started swarm (`swarmrl serve --train`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl_server.trainer.config import TrainerConfig

if TYPE_CHECKING:
    from swarmrl_server.config import ServerConfig
    from swarmrl_server.swarm import Swarm


async def attach_trainers(swarm: Swarm, config: ServerConfig) -> None:
    """Parses the train options (a bad one stops start-up with the valid choices listed),
    then starts one trainer per trainable model, resuming from `config.resume` if set."""
    from swarmrl_server.trainer.trainer import Trainer

    trainer_config = TrainerConfig.from_options(config.train_options)
    for host in swarm.models.values():
        if not host.trainable:
            continue
        trainer = Trainer(swarm, host, trainer_config)
        await trainer.start(resume=config.resume)
        host.trainer = trainer
