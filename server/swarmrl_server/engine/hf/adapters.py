"""LoRA adapters in `HFEngine`: one copy of the base serves every model's adapter.

The engine's model becomes a peft model when the first adapter arrives; each model's
adapter lives in it under an internal name (`adapter0`, `adapter1`, ...: model names may
hold characters peft's module dicts refuse), with its own policy version. A wave mixes
calls of several adapters and of the base through peft's per-row `adapter_names`
("__base__": no adapter). Loads happen between waves (the engine's weight-update path):
a plain load waits for the wave, so all tokens of a call come from one adapter version;
an interrupting one ends the wave at a token and the calls resume on the new version.
"""

from __future__ import annotations

from typing import Any

import torch

from swarmrl_server.engine.adapter import Adapter
from swarmrl_server.engine.hf.rows import Row
from swarmrl_server.errors import invalid


class HFAdapters:
    """The adapters loaded into one HFEngine's model, and their versions."""

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}
        self._inner: dict[str, str] = {}

    def load(self, model: Any, name: str, adapter: Adapter, version: int) -> Any:
        """Adds `name` on first use (wrapping `model` in peft), loads its tensors and returns
        the model to serve with. Raises INVALID_ARGUMENT for tensors of another shape."""
        from peft import get_peft_model, set_peft_model_state_dict

        config = adapter.spec.peft_config()
        inner = self._inner.get(name, f"adapter{len(self._inner)}")
        if not hasattr(model, "peft_config"):
            model = get_peft_model(model, config, adapter_name=inner)
        elif inner not in model.peft_config:
            model.add_adapter(inner, config)
        self._inner[name] = inner
        model.eval().requires_grad_(False)
        with torch.no_grad():
            result = set_peft_model_state_dict(model, dict(adapter.tensors), adapter_name=inner)
        unexpected = list(getattr(result, "unexpected_keys", None) or [])
        if unexpected:
            raise invalid("state_dict", f"not tensors of adapter {name!r}: {unexpected[:5]}")
        self.versions[name] = version
        return model

    def version_of(self, row: Row, base_version: int) -> int:
        """The version serving `row`: its adapter's (0 before the first load), else the
        base's."""
        adapter = row.params.adapter
        return self.versions.get(adapter, 0) if adapter else base_version

    def forward_kwargs(self, rows: list[Row]) -> dict[str, Any]:
        """peft's per-row adapters once any is loaded (an adapter not loaded yet is its
        version 0, whose B = 0: exactly the base)."""
        if not self.versions:
            return {}
        return {"adapter_names": [self._inner[r.params.adapter] if r.params.adapter in
                                  self.versions else "__base__" for r in rows]}
