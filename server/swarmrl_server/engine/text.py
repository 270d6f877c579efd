"""Token ids <-> text on the hot path, and incremental detokenization with stop strings
(shared by the engines that decode text themselves: `HFEngine`, `EchoEngine`)."""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

_END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")
_DETOKENIZE_CONTEXT = 5
"""Prompt tokens the detokenizer starts from, so the first token's leading space
decodes as it does mid-sentence (matters for SentencePiece-style decoders)."""


_BACKENDS: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _backend(tokenizer: Any) -> Any | None:
    """`tokenizer`'s Rust `tokenizers.Tokenizer` when transformers' wrapper would only
    forward to it, else None (cached per tokenizer).

    Why: encode runs every turn and decode twice per generated token, and the wrapper's
    argument handling is much of a short call's time (measured on the tiny model's
    tokenizer: decode of 6 ids 5.8 us through it, 2.0 us direct; encode of 108 tokens
    242 us, 147 us direct). The direct path is taken only where it is the same
    computation: a fast tokenizer whose class keeps transformers' own
    `_encode_plus`/`_decode` and does not split special tokens (encode:
    `backend.encode(text, add_special_tokens=False).ids`; decode without the clean-up
    pass, which every caller here turns off). `tests/server/engine/test_text_codec.py` checks both
    against the wrapper token for token.
    """
    try:
        return _BACKENDS[tokenizer]
    except KeyError:
        pass
    backend = None
    try:
        from tokenizers import Tokenizer
        from transformers.tokenization_utils_tokenizers import TokenizersBackend

        cls = type(tokenizer)
        if (isinstance(getattr(tokenizer, "_tokenizer", None), Tokenizer)
                and cls._encode_plus is TokenizersBackend._encode_plus
                and cls._decode is TokenizersBackend._decode
                and not getattr(tokenizer, "split_special_tokens", False)):
            backend = tokenizer._tokenizer
    except ImportError:  # another transformers layout: the wrapper it is
        pass
    _BACKENDS[tokenizer] = backend
    return backend


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of `text` as the tokenizer splits it (special tokens spelled out in it
    are recognised; none are added)."""
    backend = _backend(tokenizer)
    if backend is not None:
        return list(backend.encode(text, add_special_tokens=False).ids)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def decode_ids(tokenizer: Any, ids: Sequence[int]) -> str:
    """Text of `ids`, special tokens skipped, no clean-up of spaces."""
    backend = _backend(tokenizer)
    if backend is not None:
        return str(backend.decode(list(ids), skip_special_tokens=True))
    return str(tokenizer.decode(
        list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))


class TextStream:
    """Incremental detokenizer with stop strings.

    Text is released only when it is final: never half a UTF-8 character, and never
    a tail that might be the start of a stop string. The released pieces concatenate
    to the final text.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, prompt_ids: list[int], stop: tuple[str, ...]
    ) -> None:
        self._tokenizer = tokenizer
        self._stop = stop
        tail = prompt_ids[-_DETOKENIZE_CONTEXT:]
        if self._decode(tail).endswith("\ufffd"):
            tail = []  # the prompt ends mid-character; don't let the completion "fix" it
        self._ids = list(tail)
        self._prefix = 0  # window start: tokens before it are done with
        self._read = len(self._ids)  # tokens before it have been turned into text
        self._text = ""  # completion text decoded so far
        self._sent = 0  # chars of _text released to the caller
        self._partial = 0  # chars of the unconverted window already moved to _text
        self.stopped = False
        """Whether a stop string matched (text is cut before it)."""

    @property
    def text(self) -> str:
        return self._text[: self._sent]

    def _decode(self, ids: list[int]) -> str:
        return decode_ids(self._tokenizer, ids)

    def push(self, token_id: int | None, *, final: bool = False) -> str:
        """Adds a token (None: none) and returns the text released by it.

        `final` flushes everything held back, incomplete characters included.
        """
        if token_id is not None:
            self._ids.append(token_id)
        # Decode a short window that starts with already-converted tokens: the diff
        # to the window's old text is the new text (TGI/vLLM's method, O(1) per token).
        prefix_text = self._decode(self._ids[self._prefix : self._read])
        new_text = self._decode(self._ids[self._prefix :])
        done = len(prefix_text) + self._partial  # window chars already in _text
        if final or (len(new_text) > done and not new_text.endswith("\ufffd")):
            self._text += new_text[done:]
            self._prefix, self._read, self._partial = self._read, len(self._ids), 0
        else:
            # The window ends in an incomplete character (or invalid bytes). Characters
            # before the trailing run of U+FFFD are complete and later bytes can't
            # change them (UTF-8 is self-synchronising): take them now, keep the rest.
            stable = new_text.rstrip("\ufffd")
            if len(stable) > done:
                self._text += stable[done:]
                self._partial = len(stable) - len(prefix_text)
        return self._release(final)

    def _release(self, final: bool) -> str:
        end = len(self._text)
        if self._stop:
            # A match can only start in unreleased text: we never release a stop prefix.
            hits = [i for s in self._stop if (i := self._text.find(s, self._sent)) != -1]
            if hits:
                end = min(hits)
                self._text = self._text[:end]
                self.stopped = True
            elif not final:
                end -= self._held_stop_prefix()
        out = self._text[self._sent : end]
        self._sent = end
        return out

    def _held_stop_prefix(self) -> int:
        """Length of the longest unreleased tail that could begin a stop string."""
        pending = self._text[self._sent :]
        best = 0
        for stop in self._stop:
            for n in range(min(len(stop) - 1, len(pending)), best, -1):
                if pending.endswith(stop[:n]):
                    best = n
                    break
        return best


def end_of_turn_ids(
    tokenizer: PreTrainedTokenizerBase, generation_eos: int | list[int] | None = None
) -> tuple[int, ...]:
    """Tokens that end a turn: the tokenizer's eos, generation_config's eos
    (`generation_eos`), and ChatML-style turn ends present in the vocabulary."""
    ids: list[int] = []
    extra = [generation_eos] if isinstance(generation_eos, int) else generation_eos or []
    for tid in [tokenizer.eos_token_id, *extra]:
        if tid is not None and int(tid) not in ids:
            ids.append(int(tid))
    vocab = tokenizer.get_vocab()
    for token in _END_OF_TURN_TOKENS:
        if token in vocab and vocab[token] not in ids:
            ids.append(vocab[token])
    if not ids:
        raise ValueError("the tokenizer has no eos token; cannot tell where a turn ends")
    return tuple(ids)
