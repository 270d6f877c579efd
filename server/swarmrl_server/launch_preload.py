"""What the forkserver of `swarmrl_server.launch` imports before it forks a server: the
modules `python -m swarmrl_server.cli` imports before it serves (torch and transformers
with them), imported once, with the collector paused and then frozen
(`swarmrl_server.heap`), so neither the forkserver nor any server forked from it walks
them in a full collection. Imported for this effect only: multiprocessing's forkserver
imports its preload modules by name."""

from swarmrl_server.heap import long_lived

with long_lived():
    import transformers.models.llama.modeling_llama  # noqa: F401  (the tiny and SmolLM2 models)

    import swarmrl_server.app  # noqa: F401
    import swarmrl_server.cli  # noqa: F401
    import swarmrl_server.engine.hf.engine  # noqa: F401
    import swarmrl_server.trainer.trainer  # noqa: F401
