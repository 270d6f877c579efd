"""Each Ray worker's setup hook (`runtime_env["worker_process_setup_hook"]`, named in
`scale.cluster.init_ray`): the modules the actors run, imported before Ray hands the worker
a task or an actor, with the collector paused and then frozen (`swarmrl_server.heap`).

A Ray worker that unpickles an engine replica or a trainer worker imports torch,
transformers and the trainer on its own; measured on the Ray tests, 5 to 8 full
collections in its first 11 s, ~2 s of CPU each, and none after. Ray imports the hook by
name in every worker of the job, idle ones included, so the net saving is small: the two
Ray tests, alternated twice, used 64 and 62 CPU-s against 65 and 67. Nothing imports this
module otherwise."""

from __future__ import annotations


def preload_worker() -> None:
    from swarmrl_server.heap import long_lived

    with long_lived():
        import swarmrl_server.scale.replicas  # noqa: F401  (EngineReplicaActor)
        import swarmrl_server.scale.workers  # noqa: F401  (TrainerWorker, the rendezvous)
