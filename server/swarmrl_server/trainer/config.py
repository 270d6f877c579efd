"""Trainer settings: one frozen dataclass, filled from `swarmrl serve --train-option KEY=VALUE`.

Every field has a docstring (they are the reference for `--train-option`). Unknown
keys, values of the wrong type and names that verl's registries do not know are
rejected at start-up with the valid choices listed: an option that is silently
ignored would train something other than what the user asked for.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, get_type_hints

from swarmrl_server.trainer import choices

BATCH_RULES = ("episodes", "groups", "varied_groups", "clients")
PARTIAL_GROUPS = ("wait", "train")
TASK_MIX_SHORT = ("wait", "fill")
MODES = ("async", "sync")
WEIGHT_SYNCS = ("auto", "wait", "interrupt")
CONSTRAINED_CALLS = ("mask", "unmasked", "context")


class TrainerConfigError(ValueError):
    """A trainer setting is unknown or invalid (raised at server start-up)."""


@dataclass(frozen=True)
class TrainerConfig:
    """How a model is trained on the episodes clients end."""

    # -- algorithm (names from verl.trainer.ppo.core_algos registries) -----------------
    adv_estimator: str = choices.DEFAULT_ADV_ESTIMATOR
    """verl advantage estimator: grpo, rloo, reinforce_plus_plus, ... (outcome estimators)."""
    policy_loss: str = choices.DEFAULT_POLICY_LOSS
    """verl policy loss: vanilla (PPO-clip), gspo, cispo, ... (verl's POLICY_LOSS_REGISTRY)."""
    loss_agg_mode: str = "token-mean"
    """verl agg_loss mode. A "sequence" is an episode (its generated tokens across all of its
    rows), so every mode is independent of how an episode split into rows; the seq-mean
    modes also give every episode the same weight."""
    norm_adv_by_std_in_grpo: bool = True
    """GRPO: divide by the group's std (False gives Dr. GRPO)."""
    gamma: float = 1.0
    """Discount, for estimators that use one (REINFORCE++)."""
    clip_ratio: float = 0.2
    """PPO clip range epsilon."""
    clip_ratio_low: float | None = None
    """Lower clip range (default: clip_ratio)."""
    clip_ratio_high: float | None = None
    """Upper clip range (default: clip_ratio); > clip_ratio gives DAPO's clip-higher."""
    clip_ratio_c: float = 3.0
    """Dual-clip bound for negative advantages (vanilla loss)."""
    dro_beta: float | None = None
    """DRO loss: its beta (policy_loss=dro needs one > 0)."""
    entropy_coeff: float = 0.0
    """Weight of the entropy bonus (0 = none)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the frozen initial model (0 = no reference model)."""
    kl_penalty: str = "low_var_kl"
    """verl kl_penalty estimator: kl/k1, abs, mse/k2, low_var_kl/k3 (suffix + for k2 gradient)."""

    # -- optimizer --------------------------------------------------------------------
    lr: float = 1e-5
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    adam_beta1: float = 0.9
    """AdamW beta1."""
    adam_beta2: float = 0.999
    """AdamW beta2."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this (0 = no clipping)."""
    micro_batch_tokens: int = 8192
    """Token budget of one forward/backward (padded rows x length); gradients accumulate."""
    mini_batches: int = 1
    """Optimizer updates per batch (the batch is split by episodes)."""
    ppo_epochs: int = 1
    """Passes over each batch."""

    # -- batching ---------------------------------------------------------------------
    batch_rule: str = "episodes"
    """When a batch is ready: episodes (batch_size episodes), groups (batch_size complete
    groups), varied_groups (batch_size complete groups whose rewards are not all equal;
    uniform groups are dropped and counted), clients (every active client declared done)."""
    batch_size: int = 32
    """Episodes (batch_rule=episodes) or groups (groups, varied_groups) per batch."""
    group_size: int = 8
    """Episodes per group: episodes with the same task id and group id are cut into groups
    of this size in the order they ended. 0 = a group is whatever shares the ids."""
    partial_groups: str = "wait"
    """wait: a group trains only once it has group_size episodes; train: partial groups
    train too, once no episode of theirs is open (a group is never split: while an
    episode that would join it is open, it waits, whatever this says; trainer/batching.py)."""
    task_mix: str = ""
    """Each task's share of a batch, e.g. math:2,code:1 (batch rules episodes, groups and
    varied_groups): batch_size episodes (or groups) split by these weights, largest
    remainder first. Tasks not named only fill in (task_mix_short=fill). Empty: no mix,
    oldest groups first whatever their task."""
    task_mix_short: str = "wait"
    """When a task of task_mix has too few ready episodes for its share: wait (the batch
    waits for them) or fill (other tasks' oldest ready episodes take its place)."""

    # -- staleness and scheduling -----------------------------------------------------
    max_staleness: int = 4
    """Drop episodes with tokens more than this many policy versions older than the weights
    being trained (dropped episodes are counted in stale/dropped). Per token: a call
    resumed across a weight sync counts by its oldest version span."""
    lost_weights: str = "drop"
    """After a crash, episodes with calls generated by weights that were lost (versions
    above the checkpoint's): drop (counted in drop/lost_weights) or offpolicy (trained
    with the logprobs they were sampled with, counted in recovery/offpolicy_episodes)."""
    mode: str = "async"
    """async: generation keeps running while the trainer works; sync: generation pauses
    from batch-ready until the new weights are served."""
    weight_sync: str = "auto"
    """How new weights reach the calls in flight. wait: they finish on the weights they
    started with, and (hf, vLLM full weights) the sync waits for the longest of them.
    interrupt: each is stopped at a token boundary, the weights are updated, and it
    continues from its prompt + tokens so far under the new version (one call to the
    client; its record's version_spans say which version made which tokens). auto (the
    default): the engine's `weight_sync_default`, the one measured to learn faster there.
    vLLM on CPU: wait (TextWorld level 2, 2 seeds each: time-averaged val success 0.173
    with wait against 0.086 with interrupt; docs/results/learning.md).
    hf: interrupt, unmeasured for learning; benchmarks/weight_sync.py (32 calls of
    64-1,024 tokens, a push every 2 s) has its sync p50 4.3 s -> 0.02 s, trainer steps/min
    x3-4, generation tokens/s x0.67. The trainer's config file records the resolved value."""
    max_pending: int = 0
    """Back-pressure (async mode): pause generation while more than this many ended
    episodes are ready to train, until half of them are trained (0 = never pause). Keeps
    a slow trainer from falling behind and dropping stale work. Not with batch_rule=clients
    (clients could not finish the episodes they need to declare done)."""
    max_steps: int = 0
    """Stop training after this many steps (0 = never)."""

    # -- checkpoints, logs ------------------------------------------------------------
    checkpoint_every: int = 10
    """Checkpoint every N steps (0 = only on request and at shutdown)."""
    keep_checkpoints: int = 3
    """How many of the most recent checkpoints to keep."""
    checkpoint_on_stop: bool = True
    """Checkpoint when the server stops (if anything was trained since the last one)."""
    seed: int = 0
    """Seeds torch, numpy and random in the trainer."""
    packing: bool = False
    """Forward shared prefixes once (tree packing, timelines.pack) instead of row by row."""
    constrained_calls: str = "mask"
    """How calls decoded under a grammar (forced tool calls, JSON response formats) train:
    mask (the forward pass replays the grammar's mask, so it recomputes their recorded
    logprobs exactly, and every token where the grammar left a choice is trained;
    timelines.grammar), unmasked (the same tokens trained, their logprobs recomputed over
    the full softmax with no mask replayed: the importance ratio compares the sampler's
    masked logprobs with unmasked ones) or context (their tokens are context, loss mask
    0)."""
    progress: bool = True
    """Show a console progress bar of training steps."""

    # -- devices and workers ----------------------------------------------------------
    device: str = "auto"
    """Where the trainer runs: auto (cuda when torch sees a GPU, else cpu), cpu or cuda.
    cuda keeps fp32 master weights and AdamW state and runs the forward under bf16
    autocast (see bf16)."""
    bf16: bool = True
    """On cuda: bf16 autocast of the forward (off: fp32 throughout). Ignored on cpu."""
    grad_checkpointing: bool = False
    """Recompute activations in backward instead of keeping them (less memory, ~30 % more
    compute). Not with packing (the tree forward keeps its own K/V blocks)."""
    workers: int = 1
    """Data-parallel trainer workers (FSDP2 shards; > 1 needs `swarmrl serve --ray`)."""
    worker_cpus: float = 1.0
    """Ray: CPUs each trainer worker reserves."""
    worker_gpus: float = 0.0
    """Ray: GPUs each trainer worker reserves (1 with device=cuda on a GPU cluster)."""

    # -- LoRA (trainer/lora.py) -------------------------------------------------------
    lora_rank: int = 0
    """Train a LoRA adapter of this rank on the frozen model (peft) instead of every weight
    (0 = full fine-tuning). Weight syncs then move only the adapter; models with the same
    source and engine share one base (one copy on hf, one vLLM server for all adapters)."""
    lora_alpha: int = 16
    """LoRA scaling numerator: the adapter's update is scaled by lora_alpha / lora_rank."""
    lora_target_modules: str = "all-linear"
    """Modules that get an adapter: all-linear (every linear layer but the output head), or
    names separated by commas, e.g. q_proj,k_proj,v_proj,o_proj."""
    lora_dropout: float = 0.0
    """Dropout on the adapter's input while training (> 0: the trainer's recomputed
    logprobs then differ from the sampler's even on-policy)."""

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> TrainerConfig:
        """Parses `--train-option` strings; raises TrainerConfigError naming the bad key."""
        hints = get_type_hints(cls)
        known = {f.name for f in fields(cls)}
        values: dict[str, Any] = {}
        for key, text in options.items():
            if key not in known:
                raise TrainerConfigError(
                    f"unknown train option {key!r}; valid options: {', '.join(sorted(known))}"
                )
            values[key] = _parse(key, text, hints[key])
        config = cls(**values)
        config.validate()
        return config

    def replace(self, **changes: Any) -> TrainerConfig:
        config = dataclasses.replace(self, **changes)
        config.validate()
        return config

    def task_quotas(self) -> dict[str, int]:
        """task_mix as whole episodes (or groups) per batch, e.g. batch_size=6 and
        math:2,code:1 give {math: 4, code: 2}; {} without a mix."""
        if not self.task_mix:
            return {}
        weights: dict[str, float] = {}
        for item in self.task_mix.split(","):
            task, sep, text = item.strip().rpartition(":")
            try:
                weight = float(text)
            except ValueError:
                weight = math.nan
            if not sep or not task or not (math.isfinite(weight) and weight > 0):
                raise TrainerConfigError(
                    f"task_mix={self.task_mix!r}: expected TASK:WEIGHT,... with weights > 0")
            if task in weights:
                raise TrainerConfigError(f"task_mix names task {task!r} twice")
            weights[task] = weight
        total = sum(weights.values())
        exact = {t: self.batch_size * w / total for t, w in weights.items()}
        quotas = {t: int(q) for t, q in exact.items()}
        by_remainder = sorted(exact, key=lambda t: (quotas[t] - exact[t], t))
        for task in by_remainder[: self.batch_size - sum(quotas.values())]:
            quotas[task] += 1
        if any(q == 0 for q in quotas.values()):
            raise TrainerConfigError(
                f"task_mix={self.task_mix!r} gives a task no place in a batch of {self.batch_size}")
        return quotas

    @property
    def trains_constrained(self) -> bool:
        """Whether the choices of constrained calls train (`constrained_calls` mask or
        unmasked: merged with their grammar's `choices`), rather than being context."""
        return self.constrained_calls != "context"

    @property
    def masks_constrained(self) -> bool:
        """Whether the forward replays the grammar's mask over constrained spans (mask);
        unmasked recomputes their logprobs over the full softmax. The one place that
        decides it: `StepRunner._masks`."""
        return self.constrained_calls == "mask"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def validate(self) -> None:
        """Checks ranges and choices, and names against verl's registries (`choices`, the
        one module below this one)."""
        _choice("batch_rule", self.batch_rule, BATCH_RULES)
        _choice("partial_groups", self.partial_groups, PARTIAL_GROUPS)
        _choice("mode", self.mode, MODES)
        _choice("weight_sync", self.weight_sync, WEIGHT_SYNCS)
        positive = ("batch_size", "micro_batch_tokens", "mini_batches", "ppo_epochs",
                    "keep_checkpoints")
        for name in positive:
            if getattr(self, name) < 1:
                raise TrainerConfigError(f"{name} must be >= 1; got {getattr(self, name)}")
        for name in ("group_size", "max_staleness", "max_steps", "checkpoint_every", "max_pending"):
            if getattr(self, name) < 0:
                raise TrainerConfigError(f"{name} must be >= 0; got {getattr(self, name)}")
        for name in ("lr", "clip_ratio"):
            if not getattr(self, name) > 0:
                raise TrainerConfigError(f"{name} must be > 0; got {getattr(self, name)}")
        for name in ("weight_decay", "grad_clip", "entropy_coeff", "kl_coef"):
            if getattr(self, name) < 0:
                raise TrainerConfigError(f"{name} must be >= 0; got {getattr(self, name)}")
        if self.clip_ratio_c <= 1:
            raise TrainerConfigError(f"clip_ratio_c must be > 1; got {self.clip_ratio_c}")
        if self.policy_loss == "dro" and not (self.dro_beta and self.dro_beta > 0):
            raise TrainerConfigError("policy_loss=dro needs dro_beta > 0")
        if self.batch_rule == "varied_groups" and self.group_size == 1:
            raise TrainerConfigError(
                "batch_rule=varied_groups needs groups of more than one episode (group_size != 1)"
            )
        _choice("task_mix_short", self.task_mix_short, TASK_MIX_SHORT)
        _choice("constrained_calls", self.constrained_calls, CONSTRAINED_CALLS)
        if self.task_mix:
            if self.batch_rule == "clients":
                raise TrainerConfigError("task_mix needs a batch rule with a size, not clients")
            self.task_quotas()
        if self.max_pending and self.batch_rule == "clients":
            raise TrainerConfigError("max_pending cannot pace generation with batch_rule=clients")
        try:
            choices.resolve_device(self.device)
        except choices.DeviceError as exc:
            raise TrainerConfigError(str(exc)) from None
        if self.workers < 1:
            raise TrainerConfigError(f"workers must be >= 1; got {self.workers}")
        if self.worker_cpus < 0 or self.worker_gpus < 0:
            raise TrainerConfigError("worker_cpus and worker_gpus must be >= 0")
        if self.workers > 1 and self.kl_coef > 0 and self.lora_rank == 0:
            raise TrainerConfigError(
                "kl_coef > 0 needs a reference model, which the sharded workers (workers > 1) "
                "do not hold yet; use workers=1, kl_coef=0, or LoRA (lora_rank > 0: the "
                "reference is the base with the adapter off)")
        if self.grad_checkpointing and self.packing:
            raise TrainerConfigError(
                "grad_checkpointing cannot be combined with packing: the tree forward keeps "
                "K/V blocks across calls, which recomputation in backward cannot see")
        self._validate_lora()
        try:
            choices.check_names(adv_estimator=self.adv_estimator, policy_loss=self.policy_loss,
                                loss_agg_mode=self.loss_agg_mode, kl_penalty=self.kl_penalty)
        except choices.UnknownName as exc:
            raise TrainerConfigError(str(exc)) from None

    def _validate_lora(self) -> None:
        """Ranges of the lora_* options; whether the target modules exist is checked against
        the model when it is wrapped (trainer/lora.py)."""
        if self.lora_rank < 0:
            raise TrainerConfigError(
                f"lora_rank must be >= 0 (0 = full fine-tuning); got {self.lora_rank}")
        if not self.lora_alpha > 0:
            raise TrainerConfigError(f"lora_alpha must be > 0; got {self.lora_alpha}")
        if not 0 <= self.lora_dropout < 1:
            raise TrainerConfigError(f"lora_dropout must be in [0, 1); got {self.lora_dropout}")
        targets = [t.strip() for t in self.lora_target_modules.split(",")]
        if not all(targets) or ("all-linear" in targets and len(targets) > 1):
            raise TrainerConfigError(
                f"lora_target_modules={self.lora_target_modules!r}: expected all-linear or "
                "module names separated by commas (e.g. q_proj,v_proj)")


def options_per_model(options: dict[str, str], models: list[str]) -> dict[str, dict[str, str]]:
    """Each model's train options: the plain ``KEY=VALUE`` ones, overridden by its own
    ``MODEL.KEY=VALUE`` ones (so two models trained at once can batch differently).
    Every model's options are checked here, so a bad one stops start-up."""
    shared = {k: v for k, v in options.items() if "." not in k}
    out = {m: dict(shared) for m in models}
    for key, value in options.items():
        if "." not in key:
            continue
        model, _, option = key.partition(".")
        if model not in out:
            raise TrainerConfigError(
                f"train option {key!r} names model {model!r}; hosted models: {', '.join(models)}")
        out[model][option] = value
    for model_options in out.values():
        TrainerConfig.from_options(model_options)
    return out


def _choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise TrainerConfigError(f"{name}={value!r} is not one of: {', '.join(choices)}")


def _parse(key: str, text: str, hint: Any) -> Any:
    """Turns an option string into the field's type (bool, int, float, optional float, str)."""
    text = text.strip()
    hint_text = str(hint)
    try:
        if hint is bool or hint_text == "bool":
            lowered = text.lower()
            if lowered in ("1", "true", "yes", "on"):
                return True
            if lowered in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if hint is int or hint_text == "int":
            return int(text)
        if "float" in hint_text:
            if "None" in hint_text and text.lower() in ("", "none", "null"):
                return None
            value = float(text)
            if not math.isfinite(value):
                raise ValueError(text)
            return value
        return text
    except ValueError:
        raise TrainerConfigError(f"train option {key}={text!r}: expected {hint_text}") from None


def describe_options() -> str:
    """Every train option with its default and docstring (for `--train-option help`)."""
    import ast
    import inspect
    import textwrap

    tree = ast.parse(textwrap.dedent(inspect.getsource(TrainerConfig)))
    docs: dict[str, str] = {}
    body = tree.body[0].body  # type: ignore[attr-defined]
    for node, nxt in zip(body, body[1:]):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)):
            docs[node.target.id] = " ".join(str(nxt.value.value).split())
    lines = ["train options (--train-option KEY=VALUE):"]
    for f in fields(TrainerConfig):
        lines.append(f"  {f.name}={f.default}")
        if f.name in docs:
            lines.extend("      " + line for line in textwrap.wrap(docs[f.name], 84))
    return "\n".join(lines)
