"""verl's core algorithms, called — never re-implemented — on episode-major tensors.

Everything here takes tensors shaped `[E, L]`: one row per *episode* (its generated
tokens, concatenated across the timelines it merged into, right-padded to L). So
verl's "sequence" is an episode: advantages are per episode, GSPO's sequence ratio
is per episode, and the seq-mean `agg_loss` modes weigh every episode the same,
however many rows it became (invariant 5).

verl is imported lazily: it takes seconds and pulls in ray and tensordict.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

# The option names live in `choices`, below config; re-exported for callers of this module.
from swarmrl_server.trainer.choices import LOSS_AGG_MODES as LOSS_AGG_MODES
from swarmrl_server.trainer.choices import core_algos
from swarmrl_server.trainer.choices import valid_adv_estimators as valid_adv_estimators
from swarmrl_server.trainer.choices import valid_policy_losses as valid_policy_losses

if TYPE_CHECKING:
    from swarmrl_server.trainer.config import TrainerConfig

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
