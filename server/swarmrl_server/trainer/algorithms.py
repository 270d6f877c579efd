"""verl's core algorithms, called — never re-implemented — on episode-major tensors.

Everything here takes tensors shaped `[E, L]`: one row per *episode* (its generated
tokens, concatenated across the timelines it merged into, right-padded to L). So
verl's "sequence" is an episode: advantages are per episode, GSPO's sequence ratio
is per episode, and the seq-mean `agg_loss` modes weigh every episode the same,
however many rows it became (invariant 5).

verl is imported lazily: it takes seconds and pulls in ray and tensordict.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from swarmrl_server.trainer.config import TrainerConfig

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


def check_names(config: TrainerConfig) -> None:
    """Raises TrainerConfigError listing the valid names when one is unknown."""
    from swarmrl_server.trainer.config import TrainerConfigError

    registry = core_algos().ADV_ESTIMATOR_REGISTRY
    if config.adv_estimator in NEEDS_MORE_THAN_REWARDS:
        raise TrainerConfigError(
            f"adv_estimator={config.adv_estimator!r} needs "
            f"{NEEDS_MORE_THAN_REWARDS[config.adv_estimator]}, which swarmrl does not provide; "
            f"valid: {', '.join(valid_adv_estimators())}"
        )
    if config.adv_estimator not in registry:
        raise TrainerConfigError(
            f"unknown adv_estimator {config.adv_estimator!r}; valid (verl's registry): "
            f"{', '.join(valid_adv_estimators())}"
        )
    if config.policy_loss not in core_algos().POLICY_LOSS_REGISTRY:
        raise TrainerConfigError(
            f"unknown policy_loss {config.policy_loss!r}; valid (verl's registry): "
            f"{', '.join(valid_policy_losses())}"
        )
    if config.loss_agg_mode not in LOSS_AGG_MODES:
        raise TrainerConfigError(
            f"unknown loss_agg_mode {config.loss_agg_mode!r}; valid: {', '.join(LOSS_AGG_MODES)}"
        )
    base = config.kl_penalty.removesuffix("+")
    if base not in KL_PENALTIES:
        raise TrainerConfigError(
            f"unknown kl_penalty {config.kl_penalty!r}; valid: {', '.join(KL_PENALTIES)} "
            "(optionally with a + suffix)"
        )


def algo_config(config: TrainerConfig) -> Any:
    from verl.trainer.config.algorithm import AlgoConfig

    return AlgoConfig(
        gamma=config.gamma, adv_estimator=config.adv_estimator,
        norm_adv_by_std_in_grpo=config.norm_adv_by_std_in_grpo,
    )


def actor_config(config: TrainerConfig) -> Any:
    """The verl ActorConfig its policy losses read (clip ranges, loss mode, batch info)."""
    from verl.workers.config.actor import ActorConfig, PolicyLossConfig

    return ActorConfig(
        strategy="fsdp",  # required by the dataclass; nothing here uses it
        clip_ratio=config.clip_ratio,
        clip_ratio_low=config.clip_ratio_low if config.clip_ratio_low is not None else config.clip_ratio,
        clip_ratio_high=(
            config.clip_ratio_high if config.clip_ratio_high is not None else config.clip_ratio
        ),
        clip_ratio_c=config.clip_ratio_c,
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=max(config.group_size, 1),
        loss_agg_mode=config.loss_agg_mode,
        entropy_coeff=config.entropy_coeff,
        policy_loss=PolicyLossConfig(loss_mode=config.policy_loss, dro_beta=config.dro_beta),
    )


def outcome_rewards(rewards_E: torch.Tensor, mask_E_L: torch.Tensor) -> torch.Tensor:
    """token_level_rewards for outcome rewards: each episode's reward on its last token."""
    token_rewards_E_L = torch.zeros(mask_E_L.shape, dtype=torch.float32)
    lengths_E = mask_E_L.sum(-1).long()
    rows = torch.nonzero(lengths_E > 0).squeeze(-1)
    token_rewards_E_L[rows, lengths_E[rows] - 1] = rewards_E[rows].float()
    return token_rewards_E_L


def compute_advantages(
    rewards_E: torch.Tensor, mask_E_L: torch.Tensor, uids_E: Sequence[str], config: TrainerConfig
) -> torch.Tensor:
    """Per-token advantages `[E, L]` from verl's registered estimator, as verl's trainer calls it.

    `uids_E` are group ids (verl's `index`): episodes sharing one form a GRPO/RLOO group.
    """
    fn = core_algos().get_adv_estimator_fn(config.adv_estimator)
    kwargs: dict[str, Any] = {
        "token_level_rewards": outcome_rewards(rewards_E, mask_E_L),
        "response_mask": mask_E_L.float(),
        "config": algo_config(config),
        "index": np.array(list(uids_E), dtype=object),
    }
    params = inspect.signature(fn).parameters
    if "norm_adv_by_std_in_grpo" in params:
        kwargs["norm_adv_by_std_in_grpo"] = config.norm_adv_by_std_in_grpo
    if "index" not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        del kwargs["index"]
    advantages_E_L, _returns = fn(**kwargs)
    return torch.as_tensor(advantages_E_L).float() * mask_E_L


def set_global_batch(
    actor_cfg: Any, *, num_tokens: int, num_episodes: int, loss_scale_factor: int | None,
    dp_size: int = 1,
) -> None:
    """Tells verl's loss functions the size of the whole (mini-)batch, so micro-batch losses
    sum to the loss of the whole batch (what gradient accumulation needs). With `dp_size`
    workers verl multiplies each loss by it, which the workers' gradient mean undoes."""
    actor_cfg.global_batch_info.update(
        dp_size=dp_size, batch_num_tokens=num_tokens, global_batch_size=num_episodes,
        loss_scale_factor=loss_scale_factor,
    )


def policy_loss(
    actor_cfg: Any,
    old_logprobs_E_L: torch.Tensor,
    logprobs_E_L: torch.Tensor,
    advantages_E_L: torch.Tensor,
    mask_E_L: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, float]]:
    """verl's registered policy loss on episode-major tensors."""
    fn = core_algos().get_policy_loss_fn(actor_cfg.policy_loss.loss_mode)
    loss, metrics = fn(
        old_log_prob=old_logprobs_E_L, log_prob=logprobs_E_L, advantages=advantages_E_L,
        response_mask=mask_E_L.bool(), loss_agg_mode=actor_cfg.loss_agg_mode, config=actor_cfg,
        rollout_is_weights=None,
    )
    return loss, {k: float(v) for k, v in metrics.items() if _is_number(v)}


def agg_loss(actor_cfg: Any, loss_E_L: torch.Tensor, mask_E_L: torch.Tensor) -> torch.Tensor:
    """verl's agg_loss with the batch's aggregation mode and global sizes."""
    loss: torch.Tensor = core_algos().agg_loss(
        loss_mat=loss_E_L, loss_mask=mask_E_L.float(), loss_agg_mode=actor_cfg.loss_agg_mode,
        **actor_cfg.global_batch_info,
    )
    return loss


def kl_penalty(
    logprobs_E_L: torch.Tensor, ref_logprobs_E_L: torch.Tensor, kind: str
) -> torch.Tensor:
    kl_E_L: torch.Tensor = core_algos().kl_penalty(logprobs_E_L, ref_logprobs_E_L, kind)
    return kl_E_L


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) or (isinstance(v, torch.Tensor) and v.numel() == 1)
