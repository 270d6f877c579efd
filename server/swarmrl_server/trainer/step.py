"""One training step: episodes → rows → forward → episode-major tensors → verl loss → step.

Shapes: `_E` episodes, `_L` an episode's generated tokens (concatenated across its
rows, right-padded), `_T` tokens of a row. An episode's rows always share a
micro-batch, and verl's `agg_loss` gets the size of the whole (mini-)batch, so
accumulating micro-batch gradients gives exactly the gradient of the whole batch.

Data parallel (`dp`, see `distributed.py`): every worker sees the whole mini-batch's
episode list, computes the same global sizes from it (tokens, episodes, horizon L) and
trains only its share. verl's `agg_loss` is told `dp_size=N` and multiplies each local
loss by N; FSDP2 averages gradients over the N workers (divides by N). So the reduced
gradient is the sum of every episode's term, each scaled by the global sizes: exactly
the one-process gradient, whichever worker an episode went to.

Device (`placement`, see `device.py`): the CPU placement is a no-op, so the CPU path is
the one it always was.

Constrained calls (`constrained_calls=mask`, see `timelines.grammar`): the controller
merges with the grammar's `choices`, so forced tokens are outside the loss mask (and thus
outside `generated_mask`, the advantages and every count) and rows carry their grammar
spans; each runner replays those spans into masks for its own forward (policy and
reference alike), so a worker needs only the rows it trains. The masked forward's logprob
at a trained token is the one the engine drew it with: the importance ratio starts at 1,
as for any on-policy token. `constrained_calls=unmasked` trains the same tokens but runs
the forward without the masks (`_masks`), the comparison arm of the mask.

This module is synchronous torch code; the trainer runs it off the event loop.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from swarmrl_server.store.records import EpisodeRecord
from swarmrl_server.timelines.grammar import GrammarReplay, RowMask
from swarmrl_server.timelines.logprobs import forward_timelines, forward_tree
from swarmrl_server.timelines.merge import Choices, MergeStats, Timeline, merge_calls
from swarmrl_server.trainer import algorithms
from swarmrl_server.trainer.config import TrainerConfig
from swarmrl_server.trainer.device import CPU, Placement


class ForwardFn(Protocol):
    """(model, rows, pad id) -> per-row logprobs and entropies aligned with token_ids[1:];
    `trained_only`: computed at trained tokens only, NaN elsewhere; `masks`: per row, the
    grammar masks of its constrained spans (timelines.logprobs)."""

    def __call__(self, model: torch.nn.Module, timelines: Sequence[Timeline], pad_id: int = 0,
                 *, trained_only: bool = False, masks: Sequence[RowMask | None] | None = None,
                 ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        ...

RefContext = Callable[[torch.nn.Module], contextlib.AbstractContextManager[Any]]
"""Around the reference forward: what turns `ref_model` into the reference (LoRA: the
policy itself with its adapter off, `trainer.lora.reference`)."""


def _as_is(model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
    return contextlib.nullcontext()


def forward_for(packing: bool) -> ForwardFn:
    """The forward a step runs: row by row, or tree-packed (`packing=true`: shared token
    prefixes computed once; identical prefixes give identical activations under causal
    attention, whichever episodes they belong to, so a GRPO group's common prompt is the
    big win)."""
    return forward_tree if packing else forward_timelines


def packed_forward() -> ForwardFn:
    """The tree-packed forward (`forward_for(packing=True)`)."""
    return forward_for(True)


@dataclass
class EpisodeRows:
    """One episode's training data for one model."""

    episode_id: str
    uid: str
    """Group id (verl's `index`): episodes that share it are compared with each other."""
    task_id: str
    reward: float
    rows: list[Timeline]
    """Timelines the episode's calls merged into (one, unless the history forked)."""

    @property
    def num_generated(self) -> int:
        return sum(r.num_generated for r in self.rows)

    @property
    def num_tokens(self) -> int:
        return sum(len(r) for r in self.rows)

    @property
    def policy_versions(self) -> list[int]:
        """The version that generated each trained token (per token: see `Timeline`)."""
        return [v for r in self.rows for v, m in zip(r.policy_versions, r.loss_mask) if m]

    def staleness(self, policy_version: int) -> int:
        """Versions between `policy_version` and the oldest weights that generated any of
        its trained tokens: a call resumed across a weight sync counts by its oldest span,
        whatever version finished it. What `max_staleness` bounds."""
        return policy_version - min(self.policy_versions)

    def old_logprobs_L(self) -> torch.Tensor:
        """Logprobs recorded at generation time, in the order `gather` concatenates."""
        return torch.tensor(
            [lp for r in self.rows for lp, m in zip(r.old_logprobs[1:], r.loss_mask[1:]) if m],
            dtype=torch.float32,
        )


def episode_rows(episode: EpisodeRecord, model: str, uid: str, choices: Choices | None = None
                 ) -> tuple[EpisodeRows, MergeStats]:
    """Merges the episode's calls to `model` into timelines (other models' calls are theirs),
    with `model`'s reward (its own, else the episode's). `choices`: constrained calls train
    under their grammar (`GrammarReplay.choices`); None: as context."""
    calls = [c for c in episode.calls if c.model == model]
    rows, stats = merge_calls(calls, choices)
    own = episode.reward_for(model)
    reward = float(own) if own is not None else math.nan
    return EpisodeRows(episode.episode_id, uid, episode.task_id, reward, rows), stats


def generated_mask(episodes: Sequence[EpisodeRows]) -> torch.Tensor:
    """`[E, L]` mask of each episode's generated tokens (L = the longest episode)."""
    lengths = [e.num_generated for e in episodes]
    L = max(lengths, default=0)
    mask_E_L = torch.zeros((len(episodes), max(L, 1)), dtype=torch.float32)
    for i, n in enumerate(lengths):
        mask_E_L[i, :n] = 1.0
    return mask_E_L


def micro_batches(episodes: Sequence[EpisodeRows], token_budget: int) -> list[list[int]]:
    """Splits episode indices into micro-batches whose padded rows x length fit the budget.

    Episodes never split (their rows share a micro-batch); one over budget goes alone.
    """
    out: list[list[int]] = []
    current: list[int] = []
    rows = longest = 0
    for i, e in enumerate(episodes):
        e_rows = len(e.rows)
        e_longest = max((len(r) for r in e.rows), default=0)
        cost = (rows + e_rows) * max(longest, e_longest)
        if current and cost > token_budget:
            out.append(current)
            current, rows, longest = [], 0, 0
        current.append(i)
        rows += e_rows
        longest = max(longest, e_longest)
    if current:
        out.append(current)
    return out


def gather(
    episodes: Sequence[EpisodeRows], per_row: Sequence[torch.Tensor], L: int
) -> torch.Tensor:
    """Episode-major `[E, L]` from per-row values aligned with token_ids[1:] (rows in order)."""
    out: list[torch.Tensor] = []
    k = 0
    for e in episodes:
        pieces = []
        for row in e.rows:
            mask_T = torch.tensor(row.loss_mask[1:], dtype=torch.bool)
            pieces.append(per_row[k][mask_T])
            k += 1
        flat = torch.cat(pieces) if pieces else per_row[0].new_zeros(0)
        out.append(torch.nn.functional.pad(flat, (0, L - flat.shape[0])))
    return torch.stack(out)


def batch_advantages(episodes: Sequence[EpisodeRows], config: TrainerConfig) -> torch.Tensor:
    """`[E, L]` advantages of the whole batch, computed once by the controller: groups are
    compared across mini-batches and across data-parallel workers."""
    rewards_E = torch.tensor([e.reward for e in episodes], dtype=torch.float32)
    return algorithms.compute_advantages(
        rewards_E, generated_mask(episodes), [e.uid for e in episodes], config)


@dataclass
class StepStats:
    """What one step did (summed or token-weighted over its micro-batches)."""

    loss: float = 0.0
    pg_loss: float = 0.0
    entropy: float = 0.0
    kl_ref: float = 0.0
    grad_norm: float = 0.0
    tokens_trained: int = 0
    tokens_forward: int = 0
    micro_batches: int = 0
    updates: int = 0
    verl: dict[str, float] = field(default_factory=dict)
    """Token-weighted means of the metrics verl's policy loss returned (actor/pg_clipfrac, ...)."""
    forward_backward_s: float = 0.0
    optimizer_s: float = 0.0
    peak_memory_mb: float = 0.0
    """Peak GPU memory allocated during the step (cuda), or the process's peak RSS (cpu)."""
    workers: int = 1

    def to_metrics(self) -> dict[str, float]:
        out = {
            "loss/total": self.loss, "loss/pg": self.pg_loss, "actor/entropy": self.entropy,
            "actor/grad_norm": self.grad_norm, "actor/tokens_trained": self.tokens_trained,
            "actor/tokens_forward": self.tokens_forward, "actor/micro_batches": self.micro_batches,
            "actor/updates": self.updates, "time/forward_backward_s": self.forward_backward_s,
            "time/optimizer_s": self.optimizer_s,
            "perf/tokens_per_s": self.tokens_forward / max(
                self.forward_backward_s + self.optimizer_s, 1e-9),
            "perf/peak_memory_mb": self.peak_memory_mb, "perf/workers": float(self.workers),
        }
        out.update(self.verl)
        if self.kl_ref:
            out["actor/kl_ref"] = self.kl_ref
        return out


class DataParallel(Protocol):
    """What a step asks of its data-parallel group (`distributed.FsdpGroup` implements it):
    this worker's share of a mini-batch, the collectives around gradient accumulation, and
    the step's totals over all workers."""

    world_size: int

    def share(self, episodes: Sequence[EpisodeRows]) -> list[int]: ...

    def begin_accumulation(self, model: torch.nn.Module) -> None: ...

    def finish_accumulation(
        self, model: torch.nn.Module, pad_id: int, placement: Placement) -> None: ...

    def merge(self, stats: StepStats) -> StepStats: ...


class StepRunner:
    """Runs training steps for one model: owns its verl ActorConfig and forward function."""

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: TrainerConfig,
        *,
        pad_id: int,
        ref_model: torch.nn.Module | None = None,
        forward: ForwardFn | None = None,
        placement: Placement = CPU,
        dp: DataParallel | None = None,
        ref_context: RefContext = _as_is,
        grammar: GrammarReplay | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.config = config
        self.pad_id = pad_id
        self.ref_model = ref_model
        self.ref_context = ref_context
        self.forward: ForwardFn = forward or forward_timelines
        self.placement = placement
        self.dp = dp
        self.actor_cfg = algorithms.actor_config(config)
        self.grammar = grammar
        """Replays the grammar spans of rows (`Timeline.grammars`) into forward masks."""

    def advantages(self, episodes: Sequence[EpisodeRows]) -> torch.Tensor:
        return batch_advantages(episodes, self.config)

    def run(
        self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor | None = None
    ) -> StepStats:
        """ppo_epochs x mini_batches optimizer updates over `episodes` (advantages computed
        here unless given)."""
        stats = StepStats()
        if advantages_E_L is None:
            advantages_E_L = self.advantages(episodes)
        self.placement.reset_peak()
        n_mini = min(self.config.mini_batches, len(episodes))
        bounds = [round(i * len(episodes) / n_mini) for i in range(n_mini + 1)]
        self.model.train()
        with self.placement.step():
            advantages_E_L = advantages_E_L.to(self.placement.device)
            for _epoch in range(self.config.ppo_epochs):
                for lo, hi in zip(bounds, bounds[1:]):
                    self._update(episodes[lo:hi], advantages_E_L[lo:hi], stats)
        stats.peak_memory_mb = self.placement.peak_memory_mb()
        if self.dp is not None:  # every worker's sums, so each reports the whole step
            stats = self.dp.merge(stats)
        if stats.tokens_trained:
            for key in stats.verl:
                stats.verl[key] /= stats.tokens_trained
            stats.entropy /= stats.tokens_trained
            stats.kl_ref /= stats.tokens_trained
        stats.loss /= max(stats.updates, 1)
        stats.pg_loss /= max(stats.updates, 1)
        stats.grad_norm /= max(stats.updates, 1)
        return stats

    def _update(
        self, episodes: Sequence[EpisodeRows], advantages_E_L: torch.Tensor, stats: StepStats
    ) -> None:
        """One optimizer update on a mini-batch, accumulating micro-batch gradients."""
        t0 = time.perf_counter()
        mask_E_L = generated_mask(episodes)
        L = mask_E_L.shape[1]
        # The batch's advantages are as wide as its longest episode; this mini-batch's
        # may be shorter (the columns cut are padding: zero advantage, masked out).
        advantages_E_L = advantages_E_L[:, :L]
        dp_size = self.dp.world_size if self.dp is not None else 1
        algorithms.set_global_batch(
            self.actor_cfg, num_tokens=int(mask_E_L.sum()), num_episodes=len(episodes),
            # A fixed horizon, so seq-mean-token-sum-norm scales every micro-batch alike.
            loss_scale_factor=L, dp_size=dp_size,
        )
        self.optimizer.zero_grad(set_to_none=True)
        mine = self.dp.share(episodes) if self.dp is not None else list(range(len(episodes)))
        batches = [[mine[i] for i in mb]
                   for mb in micro_batches([episodes[i] for i in mine], self.config.micro_batch_tokens)]
        if self.dp is not None:
            self.dp.begin_accumulation(self.model)
        for idx in batches:
            mb = [episodes[i] for i in idx]
            with self.placement.autocast():
                loss, pg_loss, parts = self._micro_batch_loss(
                    mb, advantages_E_L[idx], mask_E_L[idx], L)
            loss.backward()
            n = int(mask_E_L[idx].sum())
            # Reported losses are this worker's share of the batch's (dp: merge sums them).
            stats.loss += float(loss.detach()) / dp_size
            stats.pg_loss += float(pg_loss) / dp_size
            stats.tokens_trained += n
            stats.tokens_forward += sum(e.num_tokens for e in mb)
            stats.micro_batches += 1
            stats.entropy += parts.pop("_entropy_sum", 0.0)
            stats.kl_ref += parts.pop("_kl_sum", 0.0)
            for key, value in parts.items():
                stats.verl[key] = stats.verl.get(key, 0.0) + value * n
        if self.dp is not None:
            self.dp.finish_accumulation(self.model, self.pad_id, self.placement)
        t1 = time.perf_counter()
        params = [p for p in self.model.parameters() if p.requires_grad]
        if self.config.grad_clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, self.config.grad_clip)
        else:
            norm = torch.linalg.vector_norm(
                torch.stack([p.grad.norm() for p in params if p.grad is not None])
            )
        if hasattr(norm, "full_tensor"):  # FSDP2: a DTensor norm of the sharded gradients
            norm = norm.full_tensor()
        if torch.isfinite(norm):
            self.optimizer.step()
        # else: a non-finite gradient would poison the weights; skip the update (counted
        # as grad_norm=inf in the metrics).
        self.optimizer.zero_grad(set_to_none=True)
        stats.grad_norm += float(norm)
        stats.updates += 1
        stats.forward_backward_s += t1 - t0
        stats.optimizer_s += time.perf_counter() - t1

    def _micro_batch_loss(
        self,
        episodes: Sequence[EpisodeRows],
        advantages_E_L: torch.Tensor,
        mask_E_L: torch.Tensor,
        L: int,
    ) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
        rows = [r for e in episodes for r in e.rows]
        masks = self._masks(rows)
        # Logits at the trained tokens only: `gather` reads nothing else.
        logprobs_R, entropy_R = self.forward(self.model, rows, self.pad_id, trained_only=True,
                                             masks=masks)
        logprobs_E_L = gather(episodes, logprobs_R, L)
        old_logprobs_E_L = torch.stack([
            torch.nn.functional.pad(e.old_logprobs_L(), (0, L - e.num_generated)) for e in episodes
        ])
        pg_loss, metrics = algorithms.policy_loss(
            self.actor_cfg, old_logprobs_E_L, logprobs_E_L, advantages_E_L, mask_E_L
        )
        loss = pg_loss
        entropy_E_L = gather(episodes, entropy_R, L)
        if self.config.entropy_coeff > 0:
            loss = loss - self.config.entropy_coeff * algorithms.agg_loss(
                self.actor_cfg, entropy_E_L, mask_E_L
            )
        metrics["_entropy_sum"] = float((entropy_E_L.detach() * mask_E_L).sum())
        if self.ref_model is not None and self.config.kl_coef > 0:
            with torch.no_grad(), self.ref_context(self.ref_model):
                ref_R, _ = self.forward(self.ref_model, rows, self.pad_id, trained_only=True,
                                        masks=masks)
            ref_logprobs_E_L = gather(episodes, ref_R, L)
            kl_E_L = algorithms.kl_penalty(logprobs_E_L, ref_logprobs_E_L, self.config.kl_penalty)
            kl_loss = algorithms.agg_loss(self.actor_cfg, kl_E_L, mask_E_L)
            loss = loss + self.config.kl_coef * kl_loss
            metrics["_kl_sum"] = float((kl_E_L.detach() * mask_E_L).sum())
        return loss, pg_loss.detach(), metrics

    def _masks(self, rows: Sequence[Timeline]) -> list[RowMask | None] | None:
        """The rows' grammar masks (None when no row has a constrained span, or when
        `constrained_calls=unmasked`: the forward is then the full softmax at every token,
        so the importance ratio of a trained choice compares the sampler's masked logprob
        with the unmasked recompute). The only place the forward's mask is decided."""
        if not self.config.masks_constrained or not any(r.grammars for r in rows):
            return None
        if self.grammar is None:
            raise ValueError("rows carry grammar spans but this runner has no GrammarReplay")
        return self.grammar.row_masks(rows)
