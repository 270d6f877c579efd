"""The transformers engine (`engine.Engine` over a model in the server process): the
scheduler (`engine.py`), its batch tensors and cache (`batch.py`), per-row sampling
(`rows.py`), grouped-kv attention (`attention.py`) and LoRA adapters (`adapters.py`)."""
