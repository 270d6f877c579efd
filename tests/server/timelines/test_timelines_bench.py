"""The AppWorld-shaped trace generator and the timeline-merge benchmark (at toy scale)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from benchmarks import timeline_merge, traces
from swarmrl_server.timelines.merge import FORK_EDIT, FORK_RETRY, merge_calls


def test_appworld_trace_has_the_stated_shape() -> None:
    shape = traces.appworld()
    episodes = traces.make_episodes(shape, tasks=6, seed=3)
    assert len(episodes) == 6
    for ep in episodes:
        first = ep.calls[0]
        assert abs(len(first.prompt_ids) - shape.prompt_tokens) <= 8
        assert len(ep.calls) <= shape.turns_max
        # Fewer turns only when the context ran out (the episode stops on overflow).
        near_limit = len(ep.calls[-1].prompt_ids) > shape.max_context - 2 * shape.obs_max
        assert len(ep.calls) >= shape.turns_min or near_limit
        assert all(len(c.prompt_ids) + len(c.completion_ids) <= shape.max_context for c in ep.calls)
        assert all(c.completion_ids[-1] == traces.IM_END for c in ep.calls)  # stop token kept
        timelines, stats = merge_calls(ep.calls)
        assert len(timelines) == 1 and stats.forks == 0  # linear ReAct: one timeline
    actions = [len(c.completion_ids) - 1 for ep in episodes for c in ep.calls]
    assert 60 <= statistics.median(actions) <= 130


def test_fork_heavy_trace_forks_for_the_stated_reasons() -> None:
    shape = traces.fork_heavy()
    episodes = traces.make_episodes(shape, tasks=1, seed=0)
    assert len(episodes) == shape.group_size == 6
    heads = {tuple(ep.calls[0].prompt_ids) for ep in episodes}
    assert len(heads) == 1  # the GRPO group shares the system + task prompt
    kinds: list[str] = []
    for ep in episodes:
        _, stats = merge_calls(ep.calls)
        kinds += stats.fork_kinds
    assert kinds.count(FORK_RETRY) > 0 and kinds.count(FORK_EDIT) > 0  # retries, compaction
    assert set(kinds) <= {FORK_RETRY, FORK_EDIT}


def test_benchmark_runs_and_prints_the_table(
    model_cache: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    monkeypatch.setenv("SWARMRL_CACHE", str(model_cache))
    threads = torch.get_num_threads()  # main() sets its own; give the session back its own
    try:
        _run_toy_benchmark()
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    for word in ("per-call", "merged", "tree", "FLOP lim", "tree / merged", "grad cos"):
        assert word in out
    with pytest.raises(SystemExit):
        timeline_merge.parse_args(["--help"])


def _run_toy_benchmark() -> None:
    timeline_merge.main([
        "--trace", "forks", "--turns-min", "2", "--turns-max", "3", "--prompt-tokens", "40",
        "--system-tokens", "30", "--act-median", "6", "--obs-median", "8", "--compact-every", "2",
        "--summary-median", "8", "--group-size", "2", "--repeats", "1", "--no-progress",
    ])
