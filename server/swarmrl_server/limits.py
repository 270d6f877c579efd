"""Per-field input limits, checked before any expensive work (rendering, tokenizing).

Every front door converts its request to the domain's shapes and the registry calls
these checks first, so each rule lives here once. A refusal is INVALID_ARGUMENT
(HTTP 400) naming the offending field. The prompt's length is bounded from its
UTF-8 size before it is tokenized: no token of the vocabulary spells more than
`max_token_bytes` bytes, so a prompt of B bytes has at least B / max_token_bytes
tokens, and a prompt whose lower bound already exceeds the context is refused
without tokenizing it (the check never refuses a prompt that would fit).
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from swarmrl_proto.v1 import types_pb2
from swarmrl_server.errors import invalid

MAX_MESSAGES = 4096
"""Messages in one chat request."""
MAX_TOOLS = 128
"""Tool definitions in one chat request."""
MAX_TOOL_SCHEMA_BYTES = 64 * 1024
"""Size of one tool definition (name, description, parameters) as JSON."""
# The limits a client can see coming are published in the contract (types.proto's
# RequestLimit), which the SDK's fake server reads too.
MAX_STOP = types_pb2.REQUEST_LIMIT_MAX_STOP
"""Stop strings in one request."""
MAX_STOP_CHARS = types_pb2.REQUEST_LIMIT_MAX_STOP_CHARS
"""Characters in one stop string."""
MAX_TOP_LOGPROBS = types_pb2.REQUEST_LIMIT_MAX_TOP_LOGPROBS
"""Most alternatives a call may ask for per token (vLLM's default cap)."""
MAX_LEGACY_LOGPROBS = 5
"""Most alternatives per token on the legacy /v1/completions endpoint (OpenAI's cap)."""
MAX_LABELS = 64
"""Labels on one episode."""
MAX_LABEL_KEY_CHARS = 128
MAX_LABEL_VALUE_CHARS = 1024
MAX_REASON_CHARS = 1024
"""An abort reason."""


def utf8_size(text: str, field: str) -> int:
    """Bytes of `text` in UTF-8; INVALID_ARGUMENT for a lone surrogate (e.g. JSON
    "\\ud800"), which no tokenizer can encode."""
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError as err:
        raise invalid(
            field, f"contains a lone surrogate at character {err.start} (not valid UTF-8)"
        ) from None


def text_size(value: Any, field: str) -> int:
    """Total UTF-8 bytes of every string in a JSON-like value, checking each one."""
    if isinstance(value, str):
        return utf8_size(value, field)
    if isinstance(value, Mapping):
        total = 0
        for k, v in value.items():
            total += utf8_size(str(k), field) + text_size(v, f"{field}.{k}")
        return total
    if isinstance(value, (list, tuple)):
        return sum(text_size(v, f"{field}[{i}]") for i, v in enumerate(value))
    return 0


def check_chat(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
               field: str) -> int:
    """Checks a chat request's messages and tools; returns the UTF-8 size of the
    messages' contents, which the rendered prompt contains verbatim (the bound for
    `check_prompt_bytes`; other strings may not be rendered, so they don't count).

    `field` names the input (e.g. "input.chat"); messages are `field.messages[i]`,
    tools `field.tools[i]`."""
    if len(messages) > MAX_MESSAGES:
        raise invalid(f"{field}.messages", f"at most {MAX_MESSAGES} messages; got {len(messages)}")
    text_size(messages, f"{field}.messages")  # every string is valid UTF-8
    size = sum(len(m["content"].encode()) for m in messages
               if isinstance(m.get("content"), str))
    for i, m in enumerate(messages):
        for j, call in enumerate(m.get("tool_calls") or []):
            where = f"{field}.messages[{i}].tool_calls[{j}].function.arguments"
            args = (call.get("function") or {}).get("arguments") or "{}"
            try:
                parsed = json.loads(args) if isinstance(args, str) else args
            except json.JSONDecodeError:
                raise invalid(where, "must be a JSON object") from None
            if not isinstance(parsed, dict):
                raise invalid(where, "must be a JSON object")
    tools = tools or []
    if len(tools) > MAX_TOOLS:
        raise invalid(f"{field}.tools", f"at most {MAX_TOOLS} tools; got {len(tools)}")
    for i, tool in enumerate(tools):
        where = f"{field}.tools[{i}]"
        tool_size = text_size(tool, where)
        if tool_size > MAX_TOOL_SCHEMA_BYTES:
            raise invalid(where, f"a tool definition is at most {MAX_TOOL_SCHEMA_BYTES} bytes")
        fn = tool.get("function", tool)
        params = fn.get("parameters") if isinstance(fn, Mapping) else None
        if params is not None and not isinstance(params, Mapping):
            raise invalid(f"{where}.parameters", "must be a JSON object (a JSON schema)")
    return size


def check_stop(stop: Sequence[str], field: str = "sampling.stop") -> None:
    """Stop strings: at most MAX_STOP, each non-empty, at most MAX_STOP_CHARS, valid UTF-8."""
    if len(stop) > MAX_STOP:
        raise invalid(field, f"at most {MAX_STOP} stop strings; got {len(stop)}")
    for i, text in enumerate(stop):
        if len(text) > MAX_STOP_CHARS:
            raise invalid(f"{field}[{i}]", f"at most {MAX_STOP_CHARS} characters")
        utf8_size(text, f"{field}[{i}]")
    for i, text in enumerate(stop):
        if not text:
            raise invalid(f"{field}[{i}]", "must not be empty")


class SamplingFields(Protocol):
    """What `check_sampling` reads (`engine.base.SamplingParams` has it)."""

    @property
    def temperature(self) -> float: ...
    @property
    def top_p(self) -> float: ...
    @property
    def max_tokens(self) -> int: ...
    @property
    def top_logprobs(self) -> int: ...
    @property
    def stop(self) -> Sequence[str]: ...
    @property
    def stop_token_ids(self) -> Sequence[int]: ...


def check_sampling(params: SamplingFields, vocab_size: int, prefix: str = "params") -> None:
    """The one check of sampling parameters, applied by `episodes.resolve` for every door
    (engines receive resolved requests and trust them).

    Raises INVALID_ARGUMENT naming the field as `{prefix}.{field}` ("sampling.top_p"),
    before any model work.
    """
    if params.max_tokens < 1:
        raise invalid(f"{prefix}.max_tokens", f"must be positive; got {params.max_tokens}")
    check_stop(params.stop, f"{prefix}.stop")
    if not (math.isfinite(params.temperature) and params.temperature >= 0):
        raise invalid(f"{prefix}.temperature", "must be a finite number >= 0")
    if not (math.isfinite(params.top_p) and 0 < params.top_p <= 1):
        raise invalid(f"{prefix}.top_p", "must be in (0, 1]")
    if not 0 <= params.top_logprobs <= MAX_TOP_LOGPROBS:
        raise invalid(f"{prefix}.top_logprobs", f"must be between 0 and {MAX_TOP_LOGPROBS}")
    for i, t in enumerate(params.stop_token_ids):
        if not 0 <= t < vocab_size:
            raise invalid(
                f"{prefix}.stop_token_ids[{i}]", f"{t} is outside the vocabulary [0, {vocab_size})"
            )


def check_prompt_ids(
    prompt_ids: Sequence[int], vocab_size: int, max_model_len: int, *,
    field: str = "prompt_ids", per_token: bool = False, context_field: str | None = None,
) -> list[int]:
    """The one check of a prompt given as token ids: non-empty, in the vocabulary, and
    leaving room to generate; returns it as a list of ints.

    A bad id is named `field[i]` when `per_token`, else `field`; a prompt too long for
    the context names `context_field` (default `field`)."""
    prompt = [int(t) for t in prompt_ids]
    if not prompt:
        raise invalid(field, "must not be empty")
    if len(prompt) >= max_model_len:
        raise invalid(
            context_field or field,
            f"prompt is {len(prompt)} tokens, which leave no room to generate in the "
            f"model's context (max_model_len {max_model_len})",
        )
    for i, t in enumerate(prompt):
        if not 0 <= t < vocab_size:
            name = f"{field}[{i}]" if per_token else field
            raise invalid(name, f"{t} is outside the vocabulary [0, {vocab_size})")
    return prompt


def check_labels(labels: Mapping[str, str], field: str = "labels") -> None:
    if len(labels) > MAX_LABELS:
        raise invalid(field, f"at most {MAX_LABELS} labels; got {len(labels)}")
    for k, v in labels.items():
        if not k or len(k) > MAX_LABEL_KEY_CHARS:
            raise invalid(f"{field}.{k[:32]}", f"a label key has 1 to {MAX_LABEL_KEY_CHARS} characters")
        if len(v) > MAX_LABEL_VALUE_CHARS:
            raise invalid(f"{field}.{k}", f"a label value has at most {MAX_LABEL_VALUE_CHARS} characters")
        utf8_size(k, field)
        utf8_size(v, f"{field}.{k}")


def check_reason(reason: str, field: str = "reason") -> None:
    if len(reason) > MAX_REASON_CHARS:
        raise invalid(field, f"at most {MAX_REASON_CHARS} characters")
    utf8_size(reason, field)


def max_token_bytes(tokenizer: Any) -> int:
    """The most UTF-8 bytes any one vocabulary entry spells (cached on the tokenizer).
    Token strings are measured as the tokenizer stores them (byte-level BPE writes one
    byte as a character of up to 2 UTF-8 bytes), which can only overestimate."""
    cached = getattr(tokenizer, "_swarmrl_max_token_bytes", None)
    if cached is not None:
        return int(cached)
    try:
        vocab = tokenizer.get_vocab()
        longest = max((len(t.encode("utf-8", "replace")) for t in vocab), default=0)
    except Exception:  # a tokenizer without a vocabulary: no cheap bound
        longest = 0
    longest = max(longest, 1) if longest else 1 << 30
    try:
        tokenizer._swarmrl_max_token_bytes = longest
    except Exception:
        pass
    return longest


def check_prompt_bytes(n_bytes: int, tokenizer: Any, max_model_len: int, field: str) -> None:
    """Refuses a prompt whose byte size alone proves it cannot fit the context."""
    at_least = math.ceil(n_bytes / max_token_bytes(tokenizer))
    if at_least >= max_model_len:
        reclaim_soon()
        raise invalid(
            field,
            f"prompt is {n_bytes} bytes, so at least {at_least} tokens; the model's context "
            f"is {max_model_len}",
        )


LARGE_ALLOCATION_BYTES = 1 << 20
_reclaim_pending = False


def reclaim_soon(delay_s: float = 0.2) -> None:
    """After a refused oversized request: collect garbage and trim the heap shortly, once
    the request's objects are dropped. The refusal's traceback (frames holding the
    request) forms reference cycles that only the cycle collector frees, and it may not
    run for a long time; at most one reclaim is pending at once, so a flood of refused
    requests costs one collection per `delay_s`."""
    global _reclaim_pending
    if _reclaim_pending:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return
    _reclaim_pending = True
    loop.call_later(delay_s, _reclaim)


def _reclaim() -> None:
    global _reclaim_pending
    _reclaim_pending = False
    gc.collect()
    _malloc_trim()


def _malloc_trim() -> None:
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        if name:
            ctypes.CDLL(name).malloc_trim(0)
    except (OSError, AttributeError):
        pass


def return_large_buffers_to_the_os() -> None:
    """Makes glibc serve every allocation of 1 MiB or more by mmap, so a refused 20 MiB
    request body gives its memory back to the OS when it is freed. By default glibc
    raises its mmap threshold after the first such free (up to 32 MiB), after which big
    buffers come from the heap and the process's RSS only ever grows. No-op elsewhere."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not name:
        return
    try:
        libc = ctypes.CDLL(name)
        m_mmap_threshold = -3
        libc.mallopt(m_mmap_threshold, LARGE_ALLOCATION_BYTES)  # a fixed value: no raising
    except (OSError, AttributeError):
        pass
