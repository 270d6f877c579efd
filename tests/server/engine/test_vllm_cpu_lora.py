"""The grouped LoRA ops the vllm-cpu launcher installs (`engine/vllm/cpu_lora.py`): equal to
a per-token reference, and to vLLM's own torch ops run in vLLM's venv (the oracle) on every
token that has an adapter; a launched LoRA server runs them in its engine process. What it
serves with them is checked in test_lora_vllm.py (logprobs equal the trainer's recompute)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest
import torch

from swarmrl_server.engine.vllm import cpu_lora
from tests.engine_fixtures import VLLM_LOGS, VLLM_PYTHON
from tests.helpers import REPO

T, HIDDEN, RANK, OUT, SLOTS = 29, 12, 4, 20, 3


def _reference(x: torch.Tensor, w: torch.Tensor, y: torch.Tensor, idx: torch.Tensor,
               scale: float, add: bool) -> torch.Tensor:
    """Token by token: y[t] (+)= scale * x[t] @ w[idx[t]].T; no adapter (-1): no term."""
    y = y.clone()
    w = w.squeeze(1)
    cols = min(w.shape[1], y.shape[1])
    for t in range(min(len(idx), y.shape[0])):
        term = (scale * x[t] @ w[idx[t], :cols].T) if idx[t] >= 0 else torch.zeros(cols)
        y[t, :cols] = y[t, :cols] + term if add else term
    return y


@pytest.mark.parametrize("indices", ["one adapter", "mixed", "some without"])
def test_grouped_ops_equal_the_per_token_reference(indices: str) -> None:
    g = torch.Generator().manual_seed(0)
    x, xr = torch.randn(T, HIDDEN, generator=g), torch.randn(T, RANK, generator=g)
    a = torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g)
    b = torch.randn(SLOTS, 1, OUT, RANK, generator=g)
    idx = {"one adapter": torch.full((T,), 1),
           "mixed": torch.randint(0, SLOTS, (T,), generator=g),
           "some without": torch.randint(-1, SLOTS, (T,), generator=g)}[indices]
    y0 = torch.randn(T, OUT + 6, generator=g)  # wider than the adapter: vLLM pads outputs

    got = torch.randn(T, RANK, generator=g)
    want = _reference(x, a, got, idx, 0.5, add=False)
    cpu_lora.bgmv_shrink(x, a, got, idx, 0.5)
    torch.testing.assert_close(got, want)
    for add in (True, False):
        got = y0.clone()
        cpu_lora.bgmv_expand(xr, b, got, idx, add)
        torch.testing.assert_close(got, _reference(xr, b, y0, idx, 1.0, add))
        got = y0.clone()
        cpu_lora.bgmv_expand_slice(xr, b, got, idx, 3, OUT, add)
        want = y0.clone()
        want[:, 3:3 + OUT] = _reference(xr, b, y0[:, 3:3 + OUT], idx, 1.0, add)
        torch.testing.assert_close(got, want)


def test_a_prefill_gives_each_sequence_its_own_adapter() -> None:
    g = torch.Generator().manual_seed(1)
    seq_lens, slots = torch.tensor([5, 3, 6]), torch.tensor([2, -1, 0])
    n = int(seq_lens.sum())
    x, a = torch.randn(n, HIDDEN, generator=g), torch.randn(SLOTS, 1, RANK, HIDDEN, generator=g)
    got = torch.zeros(n, RANK)
    cpu_lora.sgmv_shrink(x, a, got, torch.tensor([0, 5, 8]), seq_lens, slots, 3, 6, n, 2.0)
    per_token = torch.tensor([2] * 5 + [-1] * 3 + [0] * 6)
    torch.testing.assert_close(got, _reference(x, a, torch.zeros(n, RANK), per_token, 2.0, False))
    assert got[5:8].abs().sum() == 0


ORACLE = r"""
import importlib.util, json, sys, torch
from vllm.lora.ops import torch_ops as vllm_ops
spec = importlib.util.spec_from_file_location("cpu_lora", sys.argv[1])
ours = importlib.util.module_from_spec(spec); spec.loader.exec_module(ours)
g = torch.Generator().manual_seed(2)
T, H, R, O, S = 40, 16, 8, 24, 3
x, xr = torch.randn(T, H, generator=g), torch.randn(T, R, generator=g)
a, b = torch.randn(S, 1, R, H, generator=g), torch.randn(S, 1, O, R, generator=g)
starts, lens, slots = torch.tensor([0, 9, 30]), torch.tensor([9, 21, 10]), torch.tensor([1, 0, 2])
cases = {
    "bgmv_shrink": ((x, a), (torch.randint(0, S, (T,), generator=g), 0.25), R),
    "bgmv_expand": ((xr, b), (torch.randint(0, S, (T,), generator=g), True), O + 4),
    "bgmv_expand_slice": ((xr, b), (torch.randint(0, S, (T,), generator=g), 2, O, True), O + 4),
    "sgmv_shrink": ((x, a), (starts, lens, slots, 3, 21, T, 0.5), R),
    "sgmv_expand": ((xr, b), (starts, lens, slots, 3, 21, T, True), O),
    "sgmv_expand_slice": ((xr, b), (starts, lens, slots, 3, 21, T, 4, O, False), O + 8),
}
diff = {}
for name, ((inp, w), rest, cols) in cases.items():
    start = torch.randn(T, cols, generator=g)
    mine, theirs = start.clone(), start.clone()
    getattr(ours, name)(inp, w, mine, *rest)
    getattr(vllm_ops, name)(inp, w, theirs, *rest)
    diff[name] = float((mine - theirs).abs().max())
# A token with no adapter (-1): vLLM's torch ops index the LAST slot; the grouped ops (and
# vLLM's GPU kernels) give it no LoRA term.
idx = torch.tensor([-1] * T)
mine, theirs = torch.zeros(T, R), torch.zeros(T, R)
ours.bgmv_shrink(x, a, mine, idx, 1.0); vllm_ops.bgmv_shrink(x, a, theirs, idx, 1.0)
last = x @ a[-1, 0].T
diff["no_adapter_ours"] = float(mine.abs().max())
diff["no_adapter_vllm_minus_last_slot"] = float((theirs - last).abs().max())
print(json.dumps(diff))
"""


@pytest.mark.vllm  # runs in .venv-vllm, which `make test-fast` does not build
def test_grouped_ops_equal_vllms_own_ops_on_every_token_with_an_adapter() -> None:
    assert VLLM_PYTHON.exists(), "make test builds .venv-vllm (make .venv-vllm/.installed)"
    out = subprocess.run([str(VLLM_PYTHON), "-c", ORACLE,
                          str(REPO / "server/swarmrl_server/engine/vllm/cpu_lora.py")],
                         capture_output=True, text=True, timeout=120, check=True)
    diff = json.loads(out.stdout.strip().splitlines()[-1])
    for name in ("bgmv_shrink", "bgmv_expand", "bgmv_expand_slice", "sgmv_shrink",
                 "sgmv_expand", "sgmv_expand_slice"):
        assert diff[name] <= 1e-5, (name, diff)
    assert diff["no_adapter_ours"] == 0
    assert diff["no_adapter_vllm_minus_last_slot"] <= 1e-5


@pytest.mark.slow
def test_a_launched_lora_server_runs_them_in_its_engine_process(vllm_url: str) -> None:
    """The model runs in a worker that vLLM's CPU engine core spawns: the ops must be
    installed in every process vLLM logs from (API server, engine core, worker), not only
    in the one the launcher starts."""
    log = VLLM_LOGS[vllm_url].read_text()
    installed = set(re.findall(r"swarmrl: LoRA ops from cpu_lora\.py \(pid (\d+)\)", log))
    processes = dict(re.findall(r"^\((\w+?)(?:_DP\d+)? pid=(\d+)\)", log, re.M))
    assert {"APIServer", "EngineCore", "Worker"} <= processes.keys(), log[-2000:]
    assert set(processes.values()) <= installed, (processes, installed)
