"""How to sample: one frozen dataclass for every generating call of the SDK.

`AsyncEpisode.chat`, `stream`, `generate_tokens`, `stream_tokens` and their sync twins
take ``sampling=SamplingParams(...)``, and any of its fields as keyword arguments,
which override the object's (``ep.chat(msgs, max_tokens=8)`` keeps working):

.. code-block:: python

    greedy = swarmrl.SamplingParams(temperature=0.0, max_tokens=64)
    await ep.chat(messages, sampling=greedy)
    await ep.chat(messages, sampling=greedy, stop=["\\n"])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypedDict

__all__ = ["SamplingOptions", "SamplingParams"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample a completion. None (and empty) fields take the server's defaults."""

    temperature: float | None = None
    """Softmax temperature; 0 is greedy. None: the server's default (1.0)."""
    top_p: float | None = None
    """Nucleus sampling mass in (0, 1]. None: the server's default (1.0)."""
    max_tokens: int | None = None
    """Most tokens to generate; must be positive. None: the server's limit."""
    stop: str | Sequence[str] | None = None
    """Stop string(s); generation ends when the text ends with one (it is not returned)."""
    stop_token_ids: Sequence[int] | None = None
    """Extra token ids that end generation (the tokenizer's end of turn always does)."""
    seed: int | None = None
    """Sampling seed; the same seed, prompt and weights give the same tokens."""
    top_logprobs: int = 0
    """Alternatives to return per generated token (0 to 20)."""

    def with_options(self, options: SamplingOptions) -> SamplingParams:
        """This object with the fields given as keyword arguments replaced. An unknown
        name raises TypeError, as a misspelt keyword argument would."""
        return dataclasses.replace(self, **options) if options else self


class SamplingOptions(TypedDict, total=False):
    """`SamplingParams`' fields as keyword arguments (see there for each one)."""

    temperature: float | None
    top_p: float | None
    max_tokens: int | None
    stop: str | Sequence[str] | None
    stop_token_ids: Sequence[int] | None
    seed: int | None
    top_logprobs: int


DEFAULT = SamplingParams()
