"""The trainer's own layers (docs/explanation/architecture.md, "Inside the trainer"), read from its
imports with grimp, as tests/server/test_architecture.py reads the server's: a trainer module
imports only from its own layer or the ones below, and nothing in the trainer reaches
the swarm, the doors or Ray placement (`swarmrl_server.wiring` wires a trainer to a swarm).
"""

from __future__ import annotations

import grimp

from tests.architecture_support import graph

T = "swarmrl_server.trainer."
TRAINER_LAYERS: list[tuple[str, ...]] = [
    ("trainer",),  # the loop: batches, drops, steps, pushes weights, checkpoints
    ("workers", "distributed"),  # worker groups: in-process, and one FSDP2 worker
    ("selection", "step", "setup", "breakdown", "sft"),  # one step and its episodes; the model
    ("algorithms", "device", "lora", "batching", "history", "checkpoint", "holds"),
    ("config",),  # the options, validated with what lies below only
    ("choices", "port"),  # the names options may take; what a trainer sees of the server
]
ABOVE_THE_TRAINER = ("swarm", "grpc", "http", "app", "cli", "scale", "study")


def test_every_trainer_module_has_a_layer() -> None:
    modules = {m.removeprefix(T) for m in graph().modules if m.startswith(T)}
    placed = {name for layer in TRAINER_LAYERS for name in layer}
    assert modules == placed


def test_trainer_modules_import_only_downwards() -> None:
    layers = [grimp.Layer(*(T + name for name in layer), independent=False)
              for layer in TRAINER_LAYERS]
    illegal = graph().find_illegal_dependencies_for_layers(layers=layers)
    assert not {(d.importer, d.imported) for d in illegal}


def test_nothing_in_the_trainer_sees_the_swarm() -> None:
    reaching = {
        (m.removeprefix(T), d) for m in graph().modules if m.startswith(T)
        for d in graph().find_modules_directly_imported_by(m)
        if any(d == f"swarmrl_server.{top}" or d.startswith(f"swarmrl_server.{top}.")
               for top in ABOVE_THE_TRAINER)
    }
    assert not reaching
