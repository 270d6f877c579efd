"""Attaches a trainer to every trainable model of a started swarm (`swarmrl serve --train`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError

if TYPE_CHECKING:
    from swarmrl_server.config import ServerConfig
    from swarmrl_server.swarm import Swarm


async def attach_trainers(swarm: Swarm, config: ServerConfig) -> None:
    """Parses the train options (a bad one stops start-up with the valid choices listed),
    then starts one trainer per trainable model, resuming from `config.resume` if set."""
    from swarmrl_server.trainer.trainer import Trainer

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


def options_per_model(options: dict[str, str], models: list[str]) -> dict[str, dict[str, str]]:
    """Each model's train options: the plain ``KEY=VALUE`` ones, overridden by its own
    ``MODEL.KEY=VALUE`` ones (so two models trained at once can batch differently).
    Every model's options are checked here, so a bad one stops start-up."""
    from swarmrl_server.trainer.config import TrainerConfigError

    shared = {k: v for k, v in options.items() if "." not in k}
    out = {m: dict(shared) for m in models}
    for key, value in options.items():
        if "." not in key:
            continue
        model, _, option = key.partition(".")
        if model not in out:
            raise TrainerConfigError(
                f"train option {key!r} names model {model!r}; hosted models: {', '.join(models)}")
        out[model][option] = value
    for model_options in out.values():
        TrainerConfig.from_options(model_options)
    return out
