"""Per-token logprobs of timelines under a model: plain rows, or a tree-packed plan.

`forward_timelines` is the plain (unpacked) actor forward: one causal row per
timeline. `forward_packed` runs a `PackPlan` (see `pack.py`) and returns the same
numbers — the tests hold it to 1e-5 in fp32 — while computing each shared prefix
once. `forward_tree` plans and runs in one call, with the same signature as
`forward_timelines`, so a trainer switches packing by choosing the function.

Outputs are aligned with token_ids[1:]: entry t is log p(token t+1 | tokens <= t)
under softmax(logits / temperature of token t+1), and the entropy of that
distribution. All outputs are differentiable w.r.t. the model's parameters.

`trained_only=True` (what the trainer asks for) computes the logits only at positions
whose next token is trained (`loss_mask`), through HF's `logits_to_keep`; every other
entry is NaN. In an agent's multi-turn timeline almost every token is context (a
TextWorld episode: ~30 trained of ~900), and the `[T, vocab]` logits, their
log-softmax and entropy, with what the backward saves of them, were a fifth of a
LoRA step's time and peak memory on SmolLM2 (benchmarks/trainer_forward.py: 0.78x
time, 0.80x peak RSS). The body still runs over every token: the context is what the
trained tokens attend to.

`masks` (one `timelines.grammar.RowMask` or None per timeline): at the outputs of a
constrained call's tokens, the logits its grammar forbade are masked after the
temperature and before the log-softmax, as the engine masked them, so logprob and
entropy are those of the distribution the token was drawn from. Masks never change
which positions are computed, and a shared segment's outputs are computed once per
timeline that masks them (`_assemble`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from swarmrl_server.timelines import attention
from swarmrl_server.timelines.flops import ModelShape
from swarmrl_server.timelines.grammar import RowMask, mask_rows
from swarmrl_server.timelines.merge import Timeline
from swarmrl_server.timelines.pack import KINDS, PackPlan, PackUnit, plan_packing

Outputs = tuple[list[torch.Tensor], list[torch.Tensor]]
Masks = Sequence[RowMask | None] | None
"""Per timeline, its grammar masks (None: no constrained span), or None for none at all."""
Allowed = tuple[torch.Tensor, torch.Tensor]
"""(index_M into the flattened B x T outputs, bitmask_M_W): grammar rows to apply."""


def token_logprobs(
    logits_B_T_V: torch.Tensor, targets_B_T: torch.Tensor, temperatures_B_T: torch.Tensor,
    allowed: Allowed | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(target) under softmax(logits / T), and the entropy of that distribution
    (`allowed`: at those outputs, the softmax over the grammar's allowed tokens only)."""
    scaled_B_T_V = logits_B_T_V.float() / temperatures_B_T.unsqueeze(-1)
    if allowed is not None:
        B, T, V = scaled_B_T_V.shape
        scaled_B_T_V = mask_rows(scaled_B_T_V.reshape(B * T, V), *allowed).view(B, T, V)
    logp_B_T_V = F.log_softmax(scaled_B_T_V, dim=-1)
    logprobs_B_T = logp_B_T_V.gather(-1, targets_B_T.unsqueeze(-1)).squeeze(-1)
    entropy_B_T = -(logp_B_T_V.exp() * logp_B_T_V).sum(-1)
    return logprobs_B_T, entropy_B_T


def trained_positions(timeline: Timeline) -> list[int]:
    """Output positions (aligned with token_ids[1:]) whose next token is trained."""
    return [i for i, m in enumerate(timeline.loss_mask[1:]) if m]


def _temps(values: Sequence[float]) -> torch.Tensor:
    # Greedy calls (temperature 0) recorded raw-logit logprobs: divide by 1 for them.
    temps = torch.tensor(values, dtype=torch.float32)
    return torch.where(temps > 0, temps, torch.ones_like(temps))


def forward_timelines(
    model: torch.nn.Module,
    timelines: Sequence[Timeline],
    pad_id: int = 0,
    *,
    max_batch_tokens: int = 16384,
    trained_only: bool = False,
    masks: Masks = None,
) -> Outputs:
    """Logprob and entropy of every token after the first (`trained_only`: of every
    trained token, NaN elsewhere), for each timeline.

    Returns per-timeline tensors of length len(timeline) - 1, aligned with
    token_ids[1:]; differentiable w.r.t. the model's parameters. Rows run in
    micro-batches of similar length (within 80 % of the batch's longest, at most
    `max_batch_tokens` padded tokens; a longer row alone). No attention mask is passed:
    padding sits on the right of causal rows, where no real token attends to it, and
    without a mask the attention kernel skips the masked half of every row.
    """
    logprobs: list[torch.Tensor | None] = [None] * len(timelines)
    entropy: list[torch.Tensor | None] = [None] * len(timelines)
    order = sorted(range(len(timelines)), key=lambda i: -len(timelines[i]))
    batch: list[int] = []
    for i in order + [-1]:
        if i >= 0 and len(timelines[i]) < 2:
            empty = torch.zeros(0)
            logprobs[i], entropy[i] = empty, empty
            continue
        longest = len(timelines[batch[0]]) if batch else 0
        if batch and (
            i < 0
            or (len(batch) + 1) * longest > max_batch_tokens
            or 5 * len(timelines[i]) < 4 * longest  # would pad more than 20 %
        ):
            lp_B, ent_B = _forward_rows(model, [timelines[j] for j in batch], pad_id,
                                        trained_only, [masks[j] for j in batch] if masks else None)
            for j, lp, ent in zip(batch, lp_B, ent_B):
                logprobs[j], entropy[j] = lp, ent
            batch = []
        if i >= 0:
            batch.append(i)
    return [x for x in logprobs if x is not None], [x for x in entropy if x is not None]


def _allowed(masks: Masks, positions: Sequence[int]) -> Allowed | None:
    """The grammar rows at `positions` (the same outputs of every row), flattened."""
    index: list[int] = []
    blocks: list[torch.Tensor] = []
    for i, m in enumerate(masks or []):
        if m is not None:
            ks, rs = m.at(positions)
            index.extend(i * len(positions) + k for k in ks)
            blocks.append(m.bitmask_M_W[rs])
    if not index:
        return None
    return torch.tensor(index, dtype=torch.long), torch.cat(blocks)


def _forward_rows(
    model: torch.nn.Module, rows: Sequence[Timeline], pad_id: int, trained_only: bool,
    masks: Masks = None,
) -> Outputs:
    B, T = len(rows), max(len(t) for t in rows)
    ids_B_T = torch.full((B, T), pad_id, dtype=torch.long)
    temps_B_T = torch.ones((B, T), dtype=torch.float32)
    for i, t in enumerate(rows):
        ids_B_T[i, : len(t)] = torch.tensor(t.token_ids)
        temps_B_T[i, : len(t)] = _temps(t.temperatures)
    if trained_only:
        # The union over the rows: a position another row trains costs one logit row
        # here (on a padded position too, whose output is cut off below). Position 0
        # when none trains, so the loss still reaches the graph.
        keep = sorted({i for t in rows for i in trained_positions(t)}) or [0]
        keep_K = torch.tensor(keep)
        logits_B_K_V = model(input_ids=ids_B_T, logits_to_keep=keep_K).logits
        lp_B_K, ent_B_K = token_logprobs(
            logits_B_K_V, ids_B_T[:, keep_K + 1], temps_B_T[:, keep_K + 1],
            _allowed(masks, keep))
        nan_B_T = torch.full((B, T - 1), math.nan)
        logprobs_B_T = nan_B_T.index_copy(1, keep_K, lp_B_K)
        entropy_B_T = nan_B_T.index_copy(1, keep_K, ent_B_K)
    else:
        logits_B_T_V = model(input_ids=ids_B_T).logits
        logprobs_B_T, entropy_B_T = token_logprobs(
            logits_B_T_V[:, :-1], ids_B_T[:, 1:], temps_B_T[:, 1:],
            _allowed(masks, range(T - 1)),
        )
    return (
        [logprobs_B_T[i, : len(t) - 1] for i, t in enumerate(rows)],
        [entropy_B_T[i, : len(t) - 1] for i, t in enumerate(rows)],
    )


def packing_kinds(model: torch.nn.Module) -> tuple[str, ...]:
    """The execution kinds `model` can take ("rows" always; see `pack.py`)."""
    config = getattr(model, "config", None)
    if config is None or not getattr(model, "_supports_attention_backend", False):
        return ("rows",)
    if getattr(config, "use_sliding_window", False) or any(
        kind != "full_attention" for kind in (getattr(config, "layer_types", None) or [])
    ):
        return ("rows",)  # a window changes which prefix tokens a query sees
    if model.training and float(getattr(config, "attention_dropout", 0.0) or 0.0) > 0:
        return ("rows",)  # random masks: no two computations agree anyway
    kinds = ["rows", "tree"]
    if config._attn_implementation in ("sdpa", "eager"):
        kinds.append("dense")  # these take a custom 4D additive mask as is
    return tuple(kinds)


def forward_tree(
    model: torch.nn.Module,
    timelines: Sequence[Timeline],
    pad_id: int = 0,
    *,
    group_key: Callable[[Timeline], Hashable] | None = None,
    trained_only: bool = False,
    masks: Masks = None,
) -> Outputs:
    """`forward_timelines` with shared prefixes computed once (plans, then runs the plan)."""
    plan = plan_packing(
        timelines, ModelShape.from_model(model), group_key=group_key, kinds=packing_kinds(model)
    )
    return forward_packed(model, plan, pad_id, trained_only=trained_only, masks=masks)


def forward_packed(
    model: torch.nn.Module, plan: PackPlan, pad_id: int = 0, *, trained_only: bool = False,
    masks: Masks = None,
) -> Outputs:
    """Runs a `PackPlan`; returns what `forward_timelines(model, plan.timelines)` returns
    (`masks` aligned with `plan.timelines`)."""
    n = len(plan.timelines)
    logprobs: list[torch.Tensor | None] = [None] * n
    entropy: list[torch.Tensor | None] = [None] * n
    row_ids = [i for u in plan.units if u.kind == "rows" for i in u.timelines]
    if row_ids:
        lps, ents = forward_timelines(model, [plan.timelines[i] for i in row_ids], pad_id,
                                      trained_only=trained_only,
                                      masks=[masks[i] for i in row_ids] if masks else None)
        for i, lp, ent in zip(row_ids, lps, ents):
            logprobs[i], entropy[i] = lp, ent
    trees = [u for u in plan.units if u.kind == "tree"]
    if trees:
        attention.register()
        with attention.use_attention(model, attention.ATTN_IMPLEMENTATION):
            for unit in trees:
                kept = _kept_positions(unit, plan.timelines, trained_only)
                _assemble(unit, _run_tree(model, unit, kept, trained_only), kept,
                          plan.timelines, logprobs, entropy, masks)
    for unit in plan.units:
        if unit.kind == "dense":
            kept = _kept_positions(unit, plan.timelines, trained_only)
            _assemble(unit, _run_dense(model, unit, kept, trained_only), kept,
                      plan.timelines, logprobs, entropy, masks)
    missing = [i for i in range(n) if logprobs[i] is None]
    if missing:
        raise ValueError(f"plan leaves timelines {missing[:5]} without outputs")
    return [x for x in logprobs if x is not None], [x for x in entropy if x is not None]


def _kept_positions(
    unit: PackUnit, timelines: Sequence[Timeline], trained_only: bool
) -> list[list[int]]:
    """Per segment, the positions (in the segment, ascending) whose logits are computed:
    all of them, or (`trained_only`) those where some timeline through the segment trains
    the next token (at the last one, the first token of the timeline's next segment).
    Never empty: one logit row keeps every segment's output in the graph."""
    if not trained_only:
        return [list(range(len(seg))) for seg in unit.segments]
    kept: list[set[int]] = [set() for _ in unit.segments]
    for ti, path in zip(unit.timelines, unit.paths):
        t = timelines[ti]
        trained = trained_positions(t)
        for s in path:
            g, N = unit.segments[s].start, len(unit.segments[s])
            kept[s].update(p - g for p in trained if g <= p < g + N)
    return [sorted(k) or [0] for k in kept]


def _keep_kwargs(positions: list[int], trained_only: bool) -> dict[str, torch.Tensor]:
    return {"logits_to_keep": torch.tensor(positions)} if trained_only else {}


def _run_tree(model: torch.nn.Module, unit: PackUnit, kept: list[list[int]],
              trained_only: bool) -> list[torch.Tensor]:
    """Segment by segment; each layer's attention reads the ancestors' K/V blocks as they
    are (differentiable: the backward of a branch reaches its prefix through them).
    Returns each segment's logits at its `kept` positions."""
    config: Any = model.config
    n_layers = int(config.num_hidden_layers)
    has_children = {s.parent for s in unit.segments}
    past: dict[int, list[list[attention.KV]]] = {-1: [[] for _ in range(n_layers)]}
    logits: list[torch.Tensor] = []
    for j, seg in enumerate(unit.segments):
        ids_1_N = torch.tensor([seg.token_ids])
        pos_1_N = torch.arange(seg.start, seg.start + len(seg)).unsqueeze(0)
        with attention.tree_context(past[seg.parent]) as ctx:
            out = model(input_ids=ids_1_N, position_ids=pos_1_N, use_cache=False,
                        **_keep_kwargs(kept[j], trained_only))
        logits.append(out.logits[0])
        if j in has_children:
            past[j] = [blocks + [ctx.own[i]] for i, blocks in enumerate(past[seg.parent])]
    return logits


def tree_mask(unit: PackUnit, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Position ids `[1, L]` and additive mask `[1, 1, L, L]` of the unit packed in one row:
    a token sees its own segment causally and every token of its ancestor segments."""
    S = len(unit.segments)
    anc_S_S = torch.eye(S, dtype=torch.bool)
    for j, seg in enumerate(unit.segments):  # parents come first: their rows are final
        if seg.parent >= 0:
            anc_S_S[j] |= anc_S_S[seg.parent]
    seg_L = torch.cat([torch.full((len(s),), j) for j, s in enumerate(unit.segments)])
    pos_L = torch.cat([torch.arange(s.start, s.start + len(s)) for s in unit.segments])
    L = seg_L.shape[0]
    # Ancestors precede a segment in the packed row, so "j <= i" is causal within a
    # segment and true for every ancestor token.
    allowed_L_L = anc_S_S[seg_L][:, seg_L] & torch.ones(L, L, dtype=torch.bool).tril()
    mask_L_L = torch.zeros(L, L, dtype=dtype).masked_fill(~allowed_L_L, torch.finfo(dtype).min)
    return pos_L.unsqueeze(0), mask_L_L[None, None]


def _run_dense(model: torch.nn.Module, unit: PackUnit, kept: list[list[int]],
               trained_only: bool) -> list[torch.Tensor]:
    dtype = next(model.parameters()).dtype
    pos_1_L, mask_1_1_L_L = tree_mask(unit, dtype)
    ids_1_L = torch.tensor([[t for s in unit.segments for t in s.token_ids]])
    starts = [0]
    for seg in unit.segments[:-1]:
        starts.append(starts[-1] + len(seg))
    keep = [o + i for o, positions in zip(starts, kept) for i in positions]
    out = model(input_ids=ids_1_L, position_ids=pos_1_L, attention_mask=mask_1_1_L_L,
                **_keep_kwargs(keep, trained_only))
    return list(torch.split(out.logits[0], [len(positions) for positions in kept]))


def _assemble(
    unit: PackUnit,
    logits_per_segment: Sequence[torch.Tensor],
    kept: Sequence[list[int]],
    timelines: Sequence[Timeline],
    logprobs: list[torch.Tensor | None],
    entropy: list[torch.Tensor | None],
    masks: Masks = None,
) -> None:
    """Each timeline's outputs from its segments' logits (rows at the `kept` positions;
    outputs elsewhere are NaN). Inside a segment every timeline predicts the same next
    token, so log-softmax runs once per distinct temperature pattern; a segment's last
    position predicts the first token of the timeline's next segment, which differs
    between branches. A timeline that masks some of a segment's outputs computes them on
    its own (the same tokens may be another timeline's unmasked context)."""
    done: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}
    for ti, path in zip(unit.timelines, unit.paths):
        t = timelines[ti]
        mask = masks[ti] if masks else None
        lps: list[torch.Tensor] = []
        ents: list[torch.Tensor] = []
        for k, s in enumerate(path):
            seg, logits_K_V, positions = unit.segments[s], logits_per_segment[s], kept[s]
            g, N = seg.start, len(seg)
            if N > 1:
                temps = tuple(t.temperatures[g + 1: g + N])
                inner = [i for i in positions if i < N - 1]
                allowed = _allowed([mask], [g + i for i in inner]) if mask else None
                key: Hashable = (s, temps, ti if allowed else None)
                if key not in done:
                    # `positions` ascend: those inside the segment are the first rows.
                    at_I = torch.tensor(inner, dtype=torch.long)
                    lp_1_I, ent_1_I = token_logprobs(
                        logits_K_V[None, : at_I.shape[0]],
                        torch.tensor([seg.token_ids[1:]])[:, at_I], _temps(temps)[None][:, at_I],
                        allowed,
                    )
                    nan_N = torch.full((N - 1,), math.nan)
                    done[key] = (nan_N.index_copy(0, at_I, lp_1_I[0]),
                                 nan_N.index_copy(0, at_I, ent_1_I[0]))
                lps.append(done[key][0])
                ents.append(done[key][1])
            if k + 1 < len(path):
                nxt, temp = t.token_ids[g + N], t.temperatures[g + N]
                allowed = _allowed([mask], [g + N - 1]) if mask else None
                key = (s, nxt, temp, ti if allowed else None)
                if key not in done:
                    if positions[-1] == N - 1:
                        lp_1_1, ent_1_1 = token_logprobs(
                            logits_K_V[None, -1:], torch.tensor([[nxt]]), _temps([temp])[None],
                            allowed)
                        done[key] = (lp_1_1[0], ent_1_1[0])
                    else:  # no timeline here trains its next segment's first token
                        done[key] = (torch.full((1,), math.nan), torch.full((1,), math.nan))
                lps.append(done[key][0])
                ents.append(done[key][1])
        logprobs[ti] = torch.cat(lps) if lps else torch.zeros(0)
        entropy[ti] = torch.cat(ents) if ents else torch.zeros(0)


__all__ = [
    "KINDS", "forward_packed", "forward_timelines", "forward_tree", "packing_kinds",
    "token_logprobs", "trained_positions", "tree_mask",
]
