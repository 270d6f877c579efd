"""Constrained decoding on CPU engines: xgrammar's token masks over a torch logits row.

A constraint is an xgrammar *structural tag* (JSON): the one format both xgrammar
and vLLM's structured outputs (`structural_tag`) accept, so a JSON schema, a forced
tool call and a plain JSON object reach every engine the same way. The completion
must match it and then end the turn (the grammar's stop tokens are the engine's
end-of-turn tokens).

How constrained tokens are sampled and recorded (the invariant): at each step the
logits of tokens the grammar forbids are set to -inf *before* the log-softmax, so
the token is drawn from the masked, renormalised distribution and the logprob the
engine reports is that distribution's, the one that produced the token. Each engine
records with the call what the trainer needs to rebuild that mask (`GrammarSpec`:
the structural tag, the grammar's stop tokens and the vocabulary size it was compiled
for), and nothing per token: a matcher replayed along the recorded completion ids
gives the allowed set at every position again (`timelines.grammar`), and the
trainer's forward pass masks its logits with it, so it recomputes the very
distribution each token was drawn from (`CallRecord.grammar`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from swarmrl_server.errors import invalid


@dataclass(frozen=True)
class GrammarSpec:
    """A constrained call's grammar, as an engine compiled it: enough to rebuild the
    matcher and replay the mask along the call's completion (`timelines.grammar`)."""

    structural_tag: str
    """The xgrammar structural tag (JSON) exactly as the engine was given it."""
    stop_token_ids: tuple[int, ...]
    """The tokens the grammar lets end the completion once it is complete (the engine's
    end-of-turn tokens; vLLM adds the call's own stop token ids)."""
    vocab_size: int
    """Rows of the logits the mask covers (ids at or above the tokenizer's are never
    allowed)."""

    def to_json(self) -> str:
        return json.dumps({"structural_tag": self.structural_tag,
                           "stop_token_ids": list(self.stop_token_ids),
                           "vocab_size": self.vocab_size})

    @classmethod
    def from_json(cls, text: str) -> GrammarSpec:
        d = json.loads(text)
        return cls(str(d["structural_tag"]), tuple(int(t) for t in d["stop_token_ids"]),
                   int(d["vocab_size"]))


def grammar_json(structural_tag: str | None, stop_token_ids: Sequence[int], vocab_size: int
                 ) -> str:
    """What a call records of its grammar (`GenerationOutput.grammar`): the spec as JSON,
    or "" for an unconstrained call (which thus costs nothing)."""
    if not structural_tag:
        return ""
    stops = tuple(dict.fromkeys(int(t) for t in stop_token_ids))
    return GrammarSpec(structural_tag, stops, vocab_size).to_json()


class GrammarCompiler:
    """Compiles structural tags for one tokenizer (xgrammar caches compiled grammars)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.vocab_size = vocab_size
        info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=vocab_size, stop_token_ids=list(stop_token_ids)
        )
        self._compiler = xgr.GrammarCompiler(info, max_threads=1)

    def matcher(self, structural_tag: str, field: str = "params.structural_tag") -> Any:
        """A fresh `xgrammar.GrammarMatcher` for one call; a bad tag is INVALID_ARGUMENT."""
        try:
            compiled = self._compiler.compile_structural_tag(structural_tag)
        except Exception as exc:  # noqa: BLE001 - xgrammar raises several types for bad input
            raise invalid(field, f"cannot be compiled to a grammar: {exc}") from None
        return self._xgr.GrammarMatcher(compiled)

    def allowed(self, matcher: Any) -> list[int]:
        """Token ids `matcher`'s grammar allows next, ascending."""
        bitmask_W = self._xgr.allocate_token_bitmask(1, self.vocab_size)[0]
        matcher.fill_next_token_bitmask(bitmask_W.view(1, -1))
        bits_W_32 = (bitmask_W[:, None] >> torch.arange(32, dtype=torch.int32)) & 1
        return [i for i in bits_W_32.flatten().nonzero()[:, 0].tolist() if i < self.vocab_size]

    def mask_(self, matchers: Sequence[Any | None], logits_B_V: torch.Tensor) -> None:
        """Sets the logits of tokens each row's grammar forbids to -inf, in place
        (rows whose matcher is None are left alone)."""
        constrained = [(i, m) for i, m in enumerate(matchers) if m is not None]
        if not constrained:
            return
        rows = [i for i, _ in constrained]
        bitmask_B_W = self._xgr.allocate_token_bitmask(len(logits_B_V), self.vocab_size)
        for i, matcher in constrained:
            matcher.fill_next_token_bitmask(bitmask_B_W, i)
        # Rows without a grammar are skipped by passing only the constrained indices.
        self._xgr.apply_token_bitmask_inplace(
            logits_B_V, bitmask_B_W, vocab_size=self.vocab_size, indices=rows
        )


def json_schema_tag(schema: dict[str, Any] | bool) -> str:
    """A structural tag for a completion that is one JSON value matching `schema`.

    Whitespace between tokens is limited (one character at a time) so that a model
    cannot wander off into unbounded indentation."""
    return json.dumps({"type": "structural_tag", "format": _schema_format(schema)})


def _schema_format(schema: dict[str, Any] | bool) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": schema, "max_whitespace_cnt": 1}


def tool_call_tag(
    tools: Sequence[tuple[str, dict[str, Any]]], open_tag: str, close_tag: str
) -> str:
    """A structural tag for exactly one tool call to one of `tools` ((name, parameters
    schema) pairs), in the chat template's format:
    `<tool_call>\\n{"name": NAME, "arguments": ARGS}\\n</tool_call>`."""
    if not tools:
        raise ValueError("at least one tool is needed")
    tags = [
        {
            "type": "tag",
            "begin": f'{open_tag}\n{{"name": {json.dumps(name)}, "arguments": ',
            "content": _schema_format(parameters or {"type": "object"}),
            "end": f"}}\n{close_tag}",
        }
        for name, parameters in tools
    ]
    fmt = tags[0] if len(tags) == 1 else {"type": "or", "elements": tags}
    return json.dumps({"type": "structural_tag", "format": fmt})
