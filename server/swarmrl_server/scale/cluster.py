"""The Ray cluster a server places its actors on (`swarmrl serve --ray`): joined at
`--ray-address`, or started here on loopback. Engine replicas (`scale.replicas`) and
trainer workers (`scale.workers`) both place onto it."""

from __future__ import annotations

import os

_LOCAL_CLUSTER = False
"""This process started the cluster itself: everything stays on loopback."""


def init_ray(address: str | None, *, logical_cpus: float = 0) -> None:
    """Connects to the cluster at `address`, or starts a local one (loopback, no dashboard)
    that advertises at least `logical_cpus` CPUs: actors reserve logical CPUs, and a
    2-core machine must still place 2 replicas and 2 workers (they then share cores)."""
    import ray

    global _LOCAL_CLUSTER
    if ray.is_initialized():
        return
    env = {"PYTHONPATH": os.environ.get("PYTHONPATH", ""), "OMP_NUM_THREADS": "1"}
    runtime_env = {"env_vars": {k: v for k, v in env.items() if v},
                   "worker_process_setup_hook": "swarmrl_server.scale.preload.preload_worker"}
    address = address or os.environ.get("RAY_ADDRESS")  # e.g. inside a Ray job
    if address:
        ray.init(address=address, runtime_env=runtime_env, log_to_driver=True)
    else:
        _LOCAL_CLUSTER = True
        # "local": a new cluster of our own, never one another process left on this machine
        # (ray.init() without an address joins any it finds in /tmp/ray).
        ray.init(address="local", num_cpus=int(max(os.cpu_count() or 1, logical_cpus)),
                 include_dashboard=False, runtime_env=runtime_env, log_to_driver=False,
                 _node_ip_address="127.0.0.1")


def on_loopback() -> bool:
    """Whether this process started the cluster (so rendezvous addresses are 127.0.0.1)."""
    return _LOCAL_CLUSTER
