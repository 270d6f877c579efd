"""LoRA training with peft: the policy is a frozen base plus a trained adapter.

`lora_rank > 0` (a train option) turns it on. Then:

- the model is wrapped by `peft.get_peft_model` (`wrap`): only the adapter's A and B
  matrices require gradients, so the optimizer is built over them alone (`trainable`) and
  holds AdamW state for them alone;
- the reference model of the KL penalty (`kl_coef > 0`) is the same module with the
  adapter switched off (`reference`: `model.disable_adapter()`), not a second copy;
- a weight push sends the adapter's tensors only (`policy_weights`), under peft's saved
  names, which `engine.adapter.AdapterEngine` loads into the serving engine;
- a checkpoint holds the adapter in peft's layout (`adapter_model.safetensors` and
  `adapter_config.json`, what `PeftModel.from_pretrained` and `vllm serve --lora-modules`
  read), next to the optimizer and RNG states as for full fine-tuning (`load_adapter`).

Dropout: `lora_dropout > 0` drops activations of the adapter's input in training mode,
so the trainer's recomputed logprobs are then not the sampler's (the importance ratio of
an on-policy token is no longer exactly 1); 0, the default, keeps them equal.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import torch

from swarmrl_server.engine.adapter import ADAPTER_CONFIG, ADAPTER_WEIGHTS, LoraSpec
from swarmrl_server.trainer.config import TrainerConfig, TrainerConfigError

ADAPTER_NAME = "default"
"""The adapter's name inside the trainer's peft model (one adapter per trainer)."""


def spec_for(config: TrainerConfig) -> LoraSpec | None:
    """The adapter the options ask for, or None for full fine-tuning (lora_rank=0)."""
    if config.lora_rank == 0:
        return None
    targets = tuple(t.strip() for t in config.lora_target_modules.split(",") if t.strip())
    return LoraSpec(rank=config.lora_rank, alpha=config.lora_alpha, target_modules=targets,
                    dropout=config.lora_dropout)


def wrap(model: Any, config: TrainerConfig, *, base_path: Path | None = None) -> Any:
    """The model with a fresh adapter (peft's init: B = 0, so it starts as the base), or the
    model unchanged when lora_rank=0. Unknown target modules name the option."""
    spec = spec_for(config)
    if spec is None:
        return model
    from peft import get_peft_model

    try:
        return get_peft_model(model, spec.peft_config(str(base_path) if base_path else None),
                              adapter_name=ADAPTER_NAME)
    except ValueError as exc:  # peft: "Target modules {...} not found in the base model"
        linear = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules()
                         if isinstance(m, torch.nn.Linear)})
        raise TrainerConfigError(
            f"lora_target_modules={config.lora_target_modules!r} does not fit the model: {exc}; "
            f"its linear modules: {', '.join(linear)} (or all-linear)") from None


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def trainable(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The parameters the optimizer updates: the adapter's under LoRA, else all."""
    return [p for p in model.parameters() if p.requires_grad]


def reference(model: Any) -> contextlib.AbstractContextManager[Any]:
    """Around a forward: the base model (adapter off) for the KL reference."""
    return model.disable_adapter()  # type: ignore[no-any-return]


def policy_weights(model: Any) -> dict[str, torch.Tensor]:
    """What a weight push sends, on CPU: the adapter's tensors under LoRA, else the model's
    whole state dict."""
    if is_lora(model):
        return adapter_tensors(model)
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def adapter_tensors(
    model: Any, state_dict: dict[str, torch.Tensor] | None = None
) -> dict[str, torch.Tensor]:
    """The adapter's tensors under peft's saved names (CPU copies); from `state_dict` when
    given (an FSDP2 group's gathered full state dict)."""
    from peft import get_peft_model_state_dict

    tensors = get_peft_model_state_dict(model, state_dict=state_dict, adapter_name=ADAPTER_NAME)
    return {k: v.detach().to("cpu", copy=True) for k, v in tensors.items()}


def load_adapter(path: Path, model: Any) -> None:
    """Loads a checkpoint's adapter into the (wrapped) model, exactly."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    if not (path / ADAPTER_WEIGHTS).is_file():
        raise TrainerConfigError(
            f"checkpoint {path} holds full weights, not a LoRA adapter ({ADAPTER_WEIGHTS}): "
            "resume it without lora_rank, or start the LoRA run from its weights (--model)")
    result = set_peft_model_state_dict(model, load_file(str(path / ADAPTER_WEIGHTS)),
                                       adapter_name=ADAPTER_NAME)
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ValueError(f"checkpoint {path} does not fit the adapter: unexpected {unexpected[:5]}")


def is_adapter_checkpoint(path: Path) -> bool:
    return (path / ADAPTER_CONFIG).is_file()
