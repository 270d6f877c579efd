"""Timeline merging: exact token-prefix merge, forks, concurrency, and metadata survival.

The property tests generate random episodes: calls that extend an earlier state,
fork from the middle of one (compaction, edits), re-send an old prompt (retries) or
run from the same state in parallel (sub-agents), with ids from a small vocabulary
(so accidental id matches happen) or unique ids (so every token's origin is known).
"""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarmrl_server.store.records import CallRecord
from swarmrl_server.timelines.merge import (
    FORK_BRANCH,
    FORK_EDIT,
    FORK_RETRY,
    FORK_UNRELATED,
    MergeStats,
    merge_calls,
)


def _call(seq: int, prompt: list[int], completion: list[int], *, ep: str = "ep",
          version: int = 0, reward: float | None = None) -> CallRecord:
    return CallRecord(
        call_id=f"c{seq}", episode_id=ep, seq=seq, model="m", prompt_ids=list(prompt),
        completion_ids=list(completion),
        logprobs=[-(seq + 1) / (k + 2) for k in range(len(completion))],
        policy_version=version, finish_reason="stop", temperature=0.7, text="", reward=reward,
    )


def random_episode(seed: int, n_calls: int, vocab: int | None) -> list[CallRecord]:
    """Random calls with forks. vocab=None: every token id is unique (a counter)."""
    rng = random.Random(seed)
    counter = iter(range(10_000, 10**9))

    def ids(n: int) -> list[int]:
        return [next(counter) if vocab is None else rng.randrange(vocab) for _ in range(n)]

    states: list[list[int]] = []  # contexts after each call (prompt + completion)
    prompts: list[list[int]] = []
    calls: list[CallRecord] = []
    pending: list[tuple[list[int], list[int]]] = []  # parallel calls not yet issued
    for seq in range(n_calls):
        if pending and rng.random() < 0.7:
            prompt, completion = pending.pop(0)
        else:
            op = rng.random()
            if not states or op < 0.1:
                prompt = ids(rng.randint(1, 8))  # a new conversation
            elif op < 0.55:
                prompt = rng.choice(states[-3:]) + ids(rng.randint(0, 6))  # extend
            elif op < 0.7:
                s = rng.choice(states)
                prompt = s[: rng.randint(0, len(s))] + ids(rng.randint(1, 5))  # edit / compact
            elif op < 0.85:
                prompt = list(rng.choice(prompts))  # retry
            else:
                base = rng.choice(states)  # parallel sub-agents from one state
                for _ in range(rng.randint(1, 2)):
                    pending.append((base + ids(rng.randint(1, 4)), ids(rng.randint(1, 5))))
                prompt = base + ids(rng.randint(1, 4))
            completion = ids(rng.randint(1, 6))
        calls.append(_call(seq, prompt, completion, version=seq % 3,
                           reward=None if seq % 2 else float(seq)))
        states.append(prompt + completion)
        prompts.append(prompt)
    rng.shuffle(calls)  # merge_calls orders by seq, not by arrival
    return calls


def check_invariants(calls: list[CallRecord]) -> None:
    timelines, stats = merge_calls(calls)
    by_id = {c.call_id: c for c in calls}
    trained: dict[str, int] = {}
    for t in timelines:
        n = len(t)
        assert len(t.loss_mask) == len(t.old_logprobs) == len(t.policy_versions) == n
        assert len(t.temperatures) == len(t.call_index) == n
        assert len(t.call_ids) == len(t.call_rewards) == len(t.call_ends)
        # No mixing: the timeline is exactly the context its last call saw plus its
        # output, and every call it absorbed saw a prefix of it.
        last = by_id[t.call_ids[-1]]
        assert t.token_ids == last.prompt_ids + last.completion_ids
        for k, cid in enumerate(t.call_ids):
            c = by_id[cid]
            p, end = len(c.prompt_ids), t.call_ends[k]
            assert end == p + len(c.completion_ids)
            assert t.token_ids[:p] == c.prompt_ids
            assert t.token_ids[p:end] == c.completion_ids
            # Generated tokens trained here, with the call's own metadata.
            assert t.loss_mask[p:end] == [1] * len(c.completion_ids)
            assert t.old_logprobs[p:end] == c.logprobs
            assert t.policy_versions[p:end] == [c.policy_version] * (end - p)
            assert t.call_index[p:end] == [k] * (end - p)
            assert t.call_rewards[k] == c.reward
            trained[cid] = trained.get(cid, 0) + len(c.completion_ids)
        # Never train a non-generated token: mask 1 only inside an absorbed completion.
        spans = {i for k, cid in enumerate(t.call_ids)
                 for i in range(t.call_ends[k] - len(by_id[cid].completion_ids), t.call_ends[k])}
        assert {i for i, m in enumerate(t.loss_mask) if m} == spans
        for i in range(n):
            if not t.loss_mask[i]:
                assert (t.old_logprobs[i], t.policy_versions[i], t.call_index[i]) == (0.0, -1, -1)
    # Never lose a generated token: every call's completion is trained exactly once.
    assert trained == {c.call_id: len(c.completion_ids) for c in calls}
    assert stats.calls == len(calls)
    assert stats.timelines == len(timelines) == stats.forks + (1 if calls else 0)
    assert len(stats.fork_positions) == len(stats.fork_kinds) == stats.forks
    assert stats.tokens_per_call == sum(len(c.prompt_ids) + len(c.completion_ids) for c in calls)
    assert stats.tokens_merged == sum(len(t) for t in timelines) <= stats.tokens_per_call


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31), n_calls=st.integers(0, 14), vocab=st.sampled_from([None, 3, 50]))
def test_random_forked_episodes_keep_every_invariant(
    seed: int, n_calls: int, vocab: int | None
) -> None:
    check_invariants(random_episode(seed, n_calls, vocab))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**31), n_calls=st.integers(1, 14))
def test_unique_ids_never_cross_branches(seed: int, n_calls: int) -> None:
    """With unique ids every token has one origin: a timeline holds only tokens of the
    one history it follows (its last call's context), never a token of a sibling branch."""
    calls = random_episode(seed, n_calls, None)
    timelines, _ = merge_calls(calls)
    for t in timelines:
        assert len(set(t.token_ids)) == len(t.token_ids)  # no token twice: no splicing
    check_invariants(calls)


def test_linear_episode_is_one_timeline() -> None:
    sys_prompt = [1, 2, 3, 4]
    calls, history = [], list(sys_prompt)
    for seq in range(5):
        completion = [100 + seq, 2]
        calls.append(_call(seq, history, completion))
        history = history + completion + [50 + seq, 51 + seq]
    timelines, stats = merge_calls(calls)
    assert len(timelines) == 1 and stats.forks == 0
    t = timelines[0]
    assert t.token_ids == calls[-1].prompt_ids + calls[-1].completion_ids
    assert t.num_generated == 10
    assert stats.tokens_per_call > stats.tokens_merged == len(t)


def test_fork_kinds_and_positions() -> None:
    a = _call(0, [1, 2, 3], [4, 5])  # timeline A = 1 2 3 4 5
    retry = _call(1, [1, 2, 3], [6])  # re-sent prompt: a prefix of A
    branch = _call(2, [1, 2, 3, 4, 5], [7])  # extends A (absorbed)
    parallel = _call(3, [1, 2, 3, 4, 5, 8], [9])  # from A's state before `branch`
    edit = _call(4, [1, 2, 30], [10])  # history rewritten inside A's prompt
    other = _call(5, [99], [98])
    timelines, stats = merge_calls([a, retry, branch, parallel, edit, other])
    assert stats.forks == 4
    assert stats.fork_kinds == [FORK_RETRY, FORK_BRANCH, FORK_EDIT, FORK_UNRELATED]
    assert stats.fork_positions == [3, 5, 2, 0]
    assert [len(t.call_ids) for t in timelines] == [2, 1, 1, 1, 1]
    metrics = stats.to_metrics()
    assert metrics["merge/forks_retry"] == 1 and metrics["merge/forks_edit"] == 1
    ratio = stats.tokens_per_call / stats.tokens_merged
    assert metrics["merge/token_ratio"] == pytest.approx(ratio)


def test_parallel_subagents_each_keep_their_chain() -> None:
    """Two sub-agents with their own prompts interleave; each chain merges linearly."""
    calls, ha, hb = [], [1, 1, 1], [2, 2, 2]
    for seq in range(6):
        if seq % 2 == 0:
            calls.append(_call(seq, ha, [10 + seq]))
            ha = ha + [10 + seq, 5]
        else:
            calls.append(_call(seq, hb, [20 + seq]))
            hb = hb + [20 + seq, 6]
    timelines, stats = merge_calls(calls)
    assert len(timelines) == 2 and stats.fork_kinds == [FORK_UNRELATED]
    assert [t.num_generated for t in timelines] == [3, 3]
    check_invariants(calls)


def test_call_metadata_survives_and_bad_logprobs_are_rejected() -> None:
    a = _call(0, [1, 2], [3, 4], version=7, reward=0.5)
    b = _call(1, [1, 2, 3, 4, 9], [5], version=8)
    (t,), _ = merge_calls([b, a])
    assert t.call_ids == ["c0", "c1"] and t.call_rewards == [0.5, None]
    assert t.policy_versions == [-1, -1, 7, 7, -1, 8]
    assert t.temperatures == [1.0, 1.0, 0.7, 0.7, 1.0, 0.7]
    bad = _call(2, [1], [2, 3])
    bad.logprobs = [-1.0]
    with pytest.raises(ValueError, match="logprobs"):
        merge_calls([bad])


def test_stats_add_sums_every_field() -> None:
    _, s1 = merge_calls([_call(0, [1], [2]), _call(1, [3], [4])])
    _, s2 = merge_calls([_call(0, [1, 2], [3])])
    total = MergeStats()
    total.add(s1)
    total.add(s2)
    assert (total.calls, total.timelines, total.forks) == (3, 3, 1)
    assert total.call_lengths == [2, 2, 3] and total.fork_kinds == [FORK_UNRELATED]
    assert total.tokens_per_call == total.tokens_merged == 7
