"""The hot-path codec (`engine.text.encode_text` / `decode_ids`) gives exactly what the
transformers wrapper gives, on the tiny model's tokenizer and on SmolLM2's."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmrl_server.engine.text import _backend, decode_ids, encode_text

TEXTS = [
    "",
    "hello",
    " leading space and trailing ",
    "<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_end|><|im_end|>no space<|im_start|>",
    "naïve café — 東京 🙂 \u200b tabs\tand\nnewlines\r\n",
    '<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>',
    "ends mid-word: <|im_st",
]


def _tokenizers(tiny_model_dir: Path) -> list[object]:
    from transformers import AutoTokenizer

    from swarmrl_server.models import default_cache_dir, resolve_model, smollm2

    toks = [AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True)]
    if smollm2.is_available():
        toks.append(AutoTokenizer.from_pretrained(
            resolve_model("smollm2", default_cache_dir()), local_files_only=True))
    return toks


def test_fast_path_is_taken_and_matches_the_wrapper(tiny_model_dir: Path) -> None:
    for tok in _tokenizers(tiny_model_dir):
        assert _backend(tok) is not None, "the direct path is not taken"
        for text in TEXTS:
            want = list(tok(text, add_special_tokens=False)["input_ids"])  # type: ignore[operator]
            assert encode_text(tok, text) == want, text
            for ids in (want, want[:3], want[1:], [*want, *want]):
                expected = tok.decode(  # type: ignore[attr-defined]
                    ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                assert decode_ids(tok, ids) == expected, ids


def test_a_tokenizer_that_overrides_decoding_keeps_the_wrapper(tiny_model_dir: Path) -> None:
    from transformers import AutoTokenizer

    base = type(AutoTokenizer.from_pretrained(tiny_model_dir, local_files_only=True))

    class Shouting(base):  # type: ignore[misc, valid-type]
        def _decode(self, token_ids, skip_special_tokens=False, **kwargs):  # type: ignore[no-untyped-def]
            return super()._decode(token_ids, skip_special_tokens, **kwargs).upper()

    tok = Shouting.from_pretrained(tiny_model_dir, local_files_only=True)
    assert _backend(tok) is None
    ids = encode_text(tok, "quiet words")
    assert decode_ids(tok, ids) == "QUIET WORDS"


@pytest.mark.parametrize("text", ["a", "two words"])
def test_the_backend_is_cached_per_tokenizer(tiny_model_dir: Path, text: str) -> None:
    tok = _tokenizers(tiny_model_dir)[0]
    assert _backend(tok) is _backend(tok) is tok._tokenizer  # type: ignore[attr-defined]
    assert decode_ids(tok, encode_text(tok, text)) == text
