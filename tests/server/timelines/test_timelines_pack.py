"""Losslessness: per call, merged and tree-packed give the same logprobs and gradients.

On the tiny model (fp32), for random small episodes with forks (compaction, retries,
GRPO siblings, mixed temperatures), every generated token's logprob agrees to 1e-5
and the loss gradient to cosine >= 0.9999, whether computed per call, in merged
timelines, or tree-packed (prefix-KV segments, or one row under a 4D tree mask).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from benchmarks import traces
from swarmrl_server.store.records import CallRecord
from swarmrl_server.timelines import attention
from swarmrl_server.timelines.flops import ModelShape, causal_keys
from swarmrl_server.timelines.logprobs import (
    forward_packed,
    forward_timelines,
    forward_tree,
    packing_kinds,
    tree_mask,
)
from swarmrl_server.timelines.merge import Timeline, merge_calls
from swarmrl_server.timelines.pack import plan_packing

TINY_TRACE = traces.TraceShape(
    prompt_tokens=48, system_tokens=30, turns_min=2, turns_max=5, act_median=6, act_sigma=0.5,
    act_min=1, act_max=12, obs_median=8, obs_sigma=0.5, obs_min=2, obs_max=20, max_context=400,
    compact_every=2, summary_median=8, compact_instruction_tokens=3, retry_p=0.3, group_size=2,
)


@pytest.fixture(scope="module", autouse=True)
def one_thread() -> Iterator[None]:
    """One torch thread: on a shared 2-core machine a second thread mostly waits at
    barriers while another job holds the other core (and the numbers do not change)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    m = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir, dtype=torch.float32, local_files_only=True, attn_implementation="sdpa"
    )
    return m.train()


def _episodes(seed: int, vocab: int) -> list[traces.Episode]:
    eps = traces.make_episodes(traces.with_overrides(TINY_TRACE, vocab=vocab), 2, seed)
    for i, ep in enumerate(eps):  # mixed temperatures, greedy included
        for c in ep.calls:
            c.temperature = (0.7, 1.0, 0.0)[(i + c.seq) % 3]
    return eps


TokenValues = dict[tuple[str, int], torch.Tensor]


def _per_token(rows: list[Timeline], values: list[torch.Tensor]) -> TokenValues:
    """Generated token (call id, k-th token of its completion) -> its value."""
    out: TokenValues = {}
    for t, v in zip(rows, values):
        seen: dict[int, int] = {}
        for pos in range(1, len(t)):
            if t.loss_mask[pos]:
                ci = t.call_index[pos]
                k = seen.get(ci, 0)
                seen[ci] = k + 1
                out[(t.call_ids[ci], k)] = v[pos - 1]
    return out


def _loss_and_grad(model: torch.nn.Module, per_token: TokenValues) -> torch.Tensor:
    # A weighted sum (weights fixed per token) so the gradient is not a trivial direction.
    keys = sorted(per_token)
    weights = torch.linspace(-1.0, 2.0, len(keys))
    loss = sum(w * per_token[k] for w, k in zip(weights, keys))
    model.zero_grad(set_to_none=True)
    loss.backward()  # type: ignore[union-attr]
    return torch.cat([p.grad.flatten().double() for p in model.parameters() if p.grad is not None])


@pytest.mark.parametrize("seed", [0, 1])
def test_per_call_merged_and_packed_agree(model: torch.nn.Module, seed: int) -> None:
    eps = _episodes(seed, int(model.config.vocab_size))
    calls = [c for e in eps for c in e.calls]
    per_call = [t for c in calls for t in merge_calls([c])[0]]
    merged = [t for e in eps for t in merge_calls(e.calls)[0]]
    assert len(merged) > len(eps)  # the trace did fork
    shape = ModelShape.from_model(model)

    results = {
        "per-call": _per_token(per_call, forward_timelines(model, per_call)[0]),
        "merged": _per_token(merged, forward_timelines(model, merged)[0]),
        # What the trainer runs: logits at the trained tokens only.
        "merged, trained only": _per_token(
            merged, forward_timelines(model, merged, trained_only=True)[0]),
    }
    for kind in ("tree", "dense"):
        plan = plan_packing(merged, shape, kinds=("rows", kind), segment_overhead_tokens=0)
        assert {u.kind for u in plan.units} == {kind}
        assert plan.tokens < sum(map(len, merged))  # something was shared
        results[kind] = _per_token(merged, forward_packed(model, plan)[0])
        results[f"{kind}, trained only"] = _per_token(
            merged, forward_packed(model, plan, trained_only=True)[0])

    ref = results["per-call"]
    assert len(ref) == sum(len(c.completion_ids) for c in calls)
    grads = {}
    for name, res in results.items():
        assert res.keys() == ref.keys(), name
        diff = max(float((res[k] - ref[k]).detach().abs()) for k in ref)
        assert diff <= 1e-5, (name, diff)
        grads[name] = _loss_and_grad(model, res)  # each method's own graph
    for name, g in grads.items():
        cos = float(torch.nn.functional.cosine_similarity(g, grads["per-call"], 0))
        assert cos >= 0.9999, (name, cos)


def test_packed_outputs_match_rows_at_every_position(model: torch.nn.Module) -> None:
    """Not only generated tokens: every logprob and entropy of every timeline, GRPO-grouped."""
    eps = _episodes(5, int(model.config.vocab_size))
    merged = [t for e in eps for t in merge_calls(e.calls)[0]]
    task = {e.episode_id: e.task_id for e in eps}
    lp_ref, ent_ref = forward_timelines(model, merged)
    shape = ModelShape.from_model(model)
    plan = plan_packing(merged, shape, group_key=lambda t: task[t.episode_id])
    assert len(plan.units) >= 2  # one tree per task at least
    for lps, ents in (forward_packed(model, plan), forward_tree(model, merged)):
        for t, a, b, c, d in zip(merged, lps, lp_ref, ents, ent_ref):
            assert a.shape == b.shape == (len(t) - 1,)
            assert torch.allclose(a, b, atol=1e-5) and torch.allclose(c, d, atol=1e-4)


def test_trained_only_leaves_context_positions_uncomputed(model: torch.nn.Module) -> None:
    """The full forward's values at every trained token (their gradients:
    test_per_call_merged_and_packed_agree); context positions mostly uncomputed (NaN; a
    position another row of the batch trains is computed for both)."""
    eps = _episodes(2, int(model.config.vocab_size))
    merged = [t for e in eps for t in merge_calls(e.calls)[0]]
    lp_ref, ent_ref = forward_timelines(model, merged)
    shape = ModelShape.from_model(model)
    runs = [forward_timelines(model, merged, trained_only=True)]
    for kind in ("tree", "dense"):
        plan = plan_packing(merged, shape, kinds=("rows", kind), segment_overhead_tokens=0)
        runs.append(forward_packed(model, plan, trained_only=True))
    context = sum(len(t) - 1 - t.num_generated for t in merged)
    for lps, ents in runs:
        skipped = 0
        for t, a, b, c, d in zip(merged, lps, lp_ref, ents, ent_ref):
            trained = torch.tensor(t.loss_mask[1:], dtype=torch.bool)
            assert a.shape == b.shape == (len(t) - 1,)
            assert torch.equal(torch.isnan(a), torch.isnan(c))
            assert not torch.isnan(a[trained]).any()
            assert torch.allclose(a[trained], b[trained], atol=1e-5)
            assert torch.allclose(c[trained], d[trained], atol=1e-4)
            skipped += int(torch.isnan(a).sum())
        assert skipped > context // 2, (skipped, context)


def test_tree_attention_matches_masked_sdpa() -> None:
    torch.manual_seed(0)
    for P, N in ((0, 17), (23, 9), (40, 1)):
        q = torch.randn(2, 4, N, 16, requires_grad=True)
        k = torch.randn(2, 2, P + N, 16, requires_grad=True)
        v = torch.randn(2, 2, P + N, 16, requires_grad=True)
        mask = torch.ones(N, P + N, dtype=torch.bool).tril(P)
        ref = torch.nn.functional.scaled_dot_product_attention(
            q, k.repeat_interleave(2, 1), v.repeat_interleave(2, 1), attn_mask=mask)
        g_out = torch.randn_like(ref)
        grads_ref = torch.autograd.grad(ref, (q, k, v), g_out)
        # Past split into two blocks, grouped-query K/V (2 key-value heads for 4 queries).
        blocks = [(k[:, :, :P // 2], v[:, :, :P // 2]), (k[:, :, P // 2:P], v[:, :, P // 2:P])]
        out = attention.tree_attention(q, k[:, :, P:], v[:, :, P:], blocks if P else [], 16 ** -0.5)
        grads = torch.autograd.grad(out, (q, k, v), g_out)
        assert torch.allclose(out, ref, atol=1e-5)
        for a, b in zip(grads, grads_ref):
            assert torch.allclose(a, b, atol=1e-5)


def _timeline(ids: list[int]) -> Timeline:
    n = len(ids)
    return Timeline("e", list(ids), [1] * n, [0.0] * n, [0] * n, [1.0] * n, [0] * n, ["c"])


def test_planner_shares_where_it_pays_and_tree_mask_is_ancestry() -> None:
    shape = ModelShape(
        n_layers=4, hidden=256, attn_dim=256, vocab=2048, non_embedding_params=3_000_000
    )
    prefix = list(range(100, 1100))
    tls = [_timeline(prefix + [5, 6, 7]), _timeline(prefix + [8] * 50), _timeline([1, 2])]
    plan = plan_packing(tls, shape)
    kinds = sorted(u.kind for u in plan.units)
    assert kinds == ["rows", "tree"]
    tree = next(u for u in plan.units if u.kind == "tree")
    segments = [(s.parent, s.start, len(s)) for s in tree.segments]
    assert segments == [(-1, 0, 1000), (0, 1000, 3), (0, 1000, 50)]
    assert plan.tokens == 1000 + 3 + 50 + 2
    assert plan.flops == pytest.approx(
        shape.segment_flops(0, 1000) + shape.segment_flops(1000, 3) + shape.segment_flops(1000, 50)
        + shape.row_flops(2))
    assert shape.row_flops(10) == shape.flops(10, causal_keys(0, 10))
    # A short shared prefix is not worth a forward call: copied into each branch.
    short = plan_packing([_timeline([1, 2, 3, 4]), _timeline([1, 2, 9])], shape,
                         kinds=("rows", "tree"))
    assert [u.kind for u in short.units] == ["rows"]
    # Only "rows" allowed (a model that can't take the tree): no sharing at all.
    assert {u.kind for u in plan_packing(tls, shape, kinds=("rows",)).units} == {"rows"}
    pos_1_L, mask = tree_mask(tree, torch.float32)
    allowed = mask[0, 0] == 0
    assert pos_1_L[0].tolist() == list(range(1000)) + [1000, 1001, 1002] + list(range(1000, 1050))
    assert allowed[1001, :1002].all() and not allowed[1001, 1002:].any()  # prefix + itself
    assert allowed[1003, :1000].all() and not allowed[1003, 1000:1003].any()  # not its sibling
    with pytest.raises(ValueError, match="kinds"):
        plan_packing(tls, shape, kinds=("bogus",))


def test_fallback_and_attention_switch_restore(model: torch.nn.Module) -> None:
    class Plain(torch.nn.Module):
        pass

    assert packing_kinds(Plain()) == ("rows",)
    assert packing_kinds(model) == ("rows", "tree", "dense")
    before = model.config._attn_implementation
    attention.register()
    with attention.use_attention(model, attention.ATTN_IMPLEMENTATION):
        assert model.config._attn_implementation == attention.ATTN_IMPLEMENTATION
    assert model.config._attn_implementation == before
    # Degenerate timelines: empty and one token give empty outputs, in order.
    tls = [_timeline([]), _timeline([5]), _timeline([5, 6, 7])]
    lps, ents = forward_tree(model, tls)
    assert [x.shape[0] for x in lps] == [0, 0, 2] and [x.shape[0] for x in ents] == [0, 0, 2]


def test_merged_rows_batch_without_padding_effects(model: torch.nn.Module) -> None:
    calls = [
        CallRecord(f"c{i}", "e", i, "m", list(range(10, 30 + i)), [3, 4], [-1.0, -2.0],
                   0, "stop", 1.0, "")
        for i in range(4)
    ]
    rows = [t for c in calls for t in merge_calls([c])[0]]
    one_batch = forward_timelines(model, rows, max_batch_tokens=10_000)[0]
    singles = forward_timelines(model, rows, max_batch_tokens=1)[0]
    for a, b in zip(one_batch, singles):
        assert torch.allclose(a, b, atol=1e-5)
