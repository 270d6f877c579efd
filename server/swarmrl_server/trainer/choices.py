"""The names a train option may take, and whether they are usable here: the bottom layer
of the trainer, so that `config` validates every option without importing anything
above it.

- verl's registries (advantage estimators, policy losses), read lazily and only for a
  name other than the default: importing verl takes ~8 CPU-s and pulls in torch, ray and
  tensordict, and `swarmrl serve --help`, or `study run` checking its runs' options,
  needs none of it;
- the loss aggregation modes and KL estimators verl accepts but keeps no registry of;
- the devices (`auto|cpu|cuda|cuda:N`), resolved against what torch sees.

Everything raises `ValueError` subclasses naming the option and listing the valid
choices; `config` turns them into `TrainerConfigError`.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

LOSS_AGG_MODES = (
    "token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
)
"""The modes of verl 0.9.1's agg_loss (it keeps no registry of them)."""

KL_PENALTIES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
"""verl's kl_penalty estimators that work on sampled-token logprobs ("full" needs logits)."""

NEEDS_MORE_THAN_REWARDS = {
    "gae": "a value model (critic)",
    "remax": "greedy-rollout reward baselines",
    "optimal_token_baseline": "per-token sum of squared policy probabilities",
    "tir_optimal_token_baseline": "per-token sum of squared policy probabilities",
    "gdpo": "multi-dimensional rewards",
}
"""Registered estimators that need inputs an episode's outcome reward cannot provide."""

DEFAULT_ADV_ESTIMATOR = "grpo"
DEFAULT_POLICY_LOSS = "vanilla"
"""TrainerConfig's defaults: both in verl's registries (tests/server/trainer/
test_trainer_algorithms.py checks), so validating them needs no import of verl."""

DEVICES = ("auto", "cpu", "cuda")


class UnknownName(ValueError):
    """An algorithm name that verl (or swarmrl's use of it) does not know."""


class DeviceError(ValueError):
    """The requested device is not usable here."""


@functools.cache
def core_algos() -> Any:
    from verl.trainer.ppo import core_algos as module

    return module


def valid_adv_estimators() -> list[str]:
    """Estimators in verl's ADV_ESTIMATOR_REGISTRY that train on outcome rewards."""
    registry = core_algos().ADV_ESTIMATOR_REGISTRY
    return sorted(n for n in registry if n not in NEEDS_MORE_THAN_REWARDS)


def valid_policy_losses() -> list[str]:
    """Every loss in verl's POLICY_LOSS_REGISTRY."""
    return sorted(core_algos().POLICY_LOSS_REGISTRY)


def check_names(
    *, adv_estimator: str, policy_loss: str, loss_agg_mode: str, kl_penalty: str
) -> None:
    """Raises UnknownName listing the valid names when one is unknown."""
    if adv_estimator in NEEDS_MORE_THAN_REWARDS:
        raise UnknownName(
            f"adv_estimator={adv_estimator!r} needs {NEEDS_MORE_THAN_REWARDS[adv_estimator]}, "
            f"which swarmrl does not provide; valid: {', '.join(valid_adv_estimators())}"
        )
    if (adv_estimator != DEFAULT_ADV_ESTIMATOR
            and adv_estimator not in core_algos().ADV_ESTIMATOR_REGISTRY):
        raise UnknownName(
            f"unknown adv_estimator {adv_estimator!r}; valid (verl's registry): "
            f"{', '.join(valid_adv_estimators())}"
        )
    if policy_loss != DEFAULT_POLICY_LOSS and policy_loss not in core_algos().POLICY_LOSS_REGISTRY:
        raise UnknownName(
            f"unknown policy_loss {policy_loss!r}; valid (verl's registry): "
            f"{', '.join(valid_policy_losses())}"
        )
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise UnknownName(
            f"unknown loss_agg_mode {loss_agg_mode!r}; valid: {', '.join(LOSS_AGG_MODES)}"
        )
    if kl_penalty.removesuffix("+") not in KL_PENALTIES:
        raise UnknownName(
            f"unknown kl_penalty {kl_penalty!r}; valid: {', '.join(KL_PENALTIES)} "
            "(optionally with a + suffix)"
        )


def resolve_device(option: str) -> torch.device:
    """`auto|cpu|cuda` (or `cuda:N`) to a torch device; cuda without a GPU is refused."""
    import torch

    if option == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if option == "cpu":
        return torch.device("cpu")
    if option == "cuda" or option.startswith("cuda:"):
        if not torch.cuda.is_available():
            raise DeviceError(
                f"device={option}: torch {torch.__version__} sees no CUDA GPU here "
                "(use device=cpu or device=auto)")
        return torch.device(option)
    raise DeviceError(f"device={option!r} is not one of: {', '.join(DEVICES)} (or cuda:N)")
