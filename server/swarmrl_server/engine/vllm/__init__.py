"""The vLLM engine (`engine.Engine` over `vllm serve` processes): the client and weight
sync (`engine.py`), calls in flight and their resumption (`calls.py`), launched or
attached servers (`server.py`) and the script that starts vLLM's CLI in its own venv
(`launcher.py`, run by path: it imports nothing from swarmrl)."""
