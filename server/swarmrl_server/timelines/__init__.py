"""Timelines: an episode's calls merged on token ids, and tree-packed for the actor update.

- `merge_calls(calls) -> (timelines, MergeStats)`: exact token-prefix merge (merge.py).
- `forward_timelines(model, timelines, pad_id)`: plain rows (logprobs.py).
- `plan_packing(timelines, shape, group_key=...)` + `forward_packed(model, plan)`, or
  `forward_tree(model, timelines, pad_id)` in one call: shared prefixes computed once,
  same outputs as `forward_timelines` (pack.py, logprobs.py, attention.py).
- `ModelShape`: the FLOP model the planner and the benchmark use (flops.py).

Importing this package does not import torch-heavy modules; import the submodules.
"""
