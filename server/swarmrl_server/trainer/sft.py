"""Supervised warm start: next-token cross-entropy on the assistant turns of conversations.

Used by the demo to teach a randomly initialised model the *format* of a task
before RL. Conversations are tokenized exactly as the server will see them in a
multi-turn episode: the first prompt rendered by the chat template, each reply's
tokens followed by the end-of-turn token, then only the newly rendered text of
the next turn (see episodes/render.py) — so the warm-started model meets the
same token sequences when it is served.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from swarmrl_server.episodes.chat import Message, encode, render_text


@dataclass(frozen=True)
class SFTConfig:
    steps: int = 300
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 20
    seed: int = 0


def encode_conversation(tokenizer: Any, messages: Sequence[Message]) -> tuple[list[int], list[int]]:
    """(token ids, loss mask): 1 on each assistant reply and its end-of-turn token."""
    eos = tokenizer.convert_tokens_to_ids(tokenizer.eos_token)
    ids: list[int] = []
    mask: list[int] = []
    done = ""  # text the ids so far spell, up to (and including) the last end-of-turn token
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        prompt = render_text(tokenizer, list(messages[:i]), None, generation_prompt=True)
        if not prompt.startswith(done):
            raise ValueError("the chat template does not render this conversation as an extension")
        new = encode(tokenizer, prompt[len(done):])
        reply = encode(tokenizer, m["content"]) + [eos]
        ids += new + reply
        mask += [0] * len(new) + [1] * len(reply)
        done = prompt + m["content"] + tokenizer.eos_token
    return ids, mask


def train_sft(
    model_dir: Path,
    out_dir: Path,
    make_conversation: Callable[[random.Random], Sequence[Message]],
    config: SFTConfig = SFTConfig(),
    *,
    log: Callable[[str], None] = print,
) -> Path:
    """Fine-tunes the model in `model_dir` on sampled conversations; saves it to `out_dir`."""
    from swarmrl_server.models import load_model

    rng = random.Random(config.seed)
    torch.manual_seed(config.seed)
    model, tokenizer = load_model(model_dir)
    model.train()
    pad = tokenizer.pad_token_id
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(config.warmup_steps, 1))
        * max(0.0, 1 - s / config.steps) ** 0.5
    )
    t0 = time.monotonic()
    for step in range(config.steps):
        batch = [encode_conversation(tokenizer, make_conversation(rng))
                 for _ in range(config.batch_size)]
        T = max(len(ids) for ids, _ in batch)
        ids_B_T = torch.full((len(batch), T), pad, dtype=torch.long)
        attn_B_T = torch.zeros((len(batch), T), dtype=torch.long)
        mask_B_T = torch.zeros((len(batch), T), dtype=torch.float32)
        for b, (ids, mask) in enumerate(batch):
            ids_B_T[b, : len(ids)] = torch.tensor(ids)
            attn_B_T[b, : len(ids)] = 1
            mask_B_T[b, : len(ids)] = torch.tensor(mask, dtype=torch.float32)
        logits_B_T_V = model(input_ids=ids_B_T, attention_mask=attn_B_T).logits
        # Position t predicts token t+1: shift targets and mask by one.
        nll_B_T = F.cross_entropy(
            logits_B_T_V[:, :-1].transpose(1, 2).float(), ids_B_T[:, 1:], reduction="none"
        )
        loss = (nll_B_T * mask_B_T[:, 1:]).sum() / mask_B_T[:, 1:].sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == config.steps - 1:
            log(f"sft step {step + 1}/{config.steps} loss {loss.item():.4f} "
                f"({time.monotonic() - t0:.0f}s)")
    model.eval()
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
