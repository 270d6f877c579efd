"""Request resolution: from what a front door received to what an engine runs, in one step.

Every door (gRPC, the OpenAI and Anthropic shims) converts its request to a
`SamplingRequest` and a prompt (chat messages or token ids); `resolve` then applies, in
this order and nowhere else:

1. the sampling checks (`limits.check_sampling`: ranges, stop strings, top-logprobs cap),
   on the values the client sent, defaults filled in;
2. the server's defaults (`GenerationPolicy.default_max_tokens`) and forced values
   (`force_temperature`, `force_top_p`, reported back as overrides, never silently),
   then the rule of a trained model (`check_trained_sampling`) on the values that run;
3. the prompt checks: a chat is bounded from its size in bytes before the template and
   the tokenizer see it, then rendered (extending an earlier call of the episode when it
   continues one); token ids are checked against the vocabulary and the context;
4. the room left in the context: `max_tokens` may not exceed it when the client set it,
   and the server's default shrinks to fit.

Nothing here touches the store or an engine's weights, so a refusal leaves no state
behind. Engines receive only resolved requests and trust them (they assert their
invariants, `engine.base.check_resolved`, and re-validate nothing). The limits themselves are published in `swarmrl_server.limits`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from swarmrl_server.config import PAUSE_WAIT_S
from swarmrl_server.engine.base import Engine, SamplingParams
from swarmrl_server.episodes.chat import Annotations, Message, validate_messages
from swarmrl_server.episodes.render import render_prompt
from swarmrl_server.errors import invalid
from swarmrl_server.hosting import ModelHost
from swarmrl_server.limits import check_chat, check_prompt_bytes, check_prompt_ids, check_sampling
from swarmrl_server.store.records import CallRecord


@dataclass(frozen=True)
class SamplingRequest:
    """Sampling fields as the client sent them; None means "server default"."""

    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    structural_tag: str | None = None
    """A grammar the completion must match (see `engine.grammar`); its call is recorded
    as constrained."""


@dataclass
class GenerationPolicy:
    """Server-side rules applied to every generation request."""

    default_max_tokens: int = 256
    force_temperature: float | None = None
    """When set, training generations sample at this temperature whatever the client
    asks (reported back as an override, never silently)."""
    force_top_p: float | None = None
    max_inflight: int = 512
    """Most generations one model runs or queues at once; more are refused with
    UNAVAILABLE (OVER_CAPACITY, HTTP 429) and a retry hint instead of piling up."""
    pause_wait_s: float = PAUSE_WAIT_S
    """How long a call that arrives while its model is paused (an admin pause, a weight
    sync, the trainer's back-pressure) waits for the pause to lift before it is refused
    with UNAVAILABLE (GENERATION_PAUSED, HTTP 429); 0 refuses at once."""


@dataclass(frozen=True)
class ResolvedRequest:
    """What the engine runs, and what the call's record keeps of the request."""

    prompt_ids: list[int]
    params: SamplingParams
    overridden: dict[str, Any] = field(default_factory=dict)
    """Sampling fields the server's policy replaced ({field: value used})."""
    chat: dict[str, Any] | None = None
    """For a chat call: messages, tools and why it did not extend an earlier call (the
    reply is added once generated); None for token input."""
    rendered_text: str = ""
    """The chat's rendered prompt text (kept in memory for the next turn)."""


def check_trained_sampling(params: SamplingParams, *, forced: bool = False) -> None:
    """The sampling rule of a trainable model, the same on every engine (hf, vLLM, echo,
    Ray replicas) and every door (gRPC, OpenAI, Anthropic): what the recorded logprobs
    cannot represent is refused (INVALID_ARGUMENT naming the field; a 400 over HTTP).

    The trainer's importance ratio compares each token's recorded logprob with its
    recompute from a plain forward pass: log_softmax(logits / T), masked only by a
    recorded grammar. Nucleus sampling (top_p < 1 at T > 0) draws from a truncated
    distribution that neither side represents: hf records the logprob before the
    truncation (so the ratio is computed for a distribution that did not draw the token),
    vLLM the one after it (which the recompute cannot reproduce). Either way training would
    be biased, so a trainable model samples the full distribution or greedily. (top_k and
    the other truncations are refused for every model, at the doors that carry them:
    `http.protocol.REFUSED_UNLESS_NEUTRAL`; gRPC has no such field.) A model that is not
    trained may sample a nucleus; its logprobs are then the engine's own (hf: before the
    truncation, vLLM: after it) and train nothing. `forced`: the top_p came from the
    server's policy (`force_top_p`), not the client."""
    if params.top_p < 1 and params.temperature > 0:
        by = " (forced by the server)" if forced else ""
        raise invalid(
            "sampling.top_p",
            f"must be 1 for a trainable model; got {params.top_p}{by}: a nucleus's logprobs "
            "are not those of the full distribution, which training recomputes",
        )


def resolve_sampling(
    s: SamplingRequest, policy: GenerationPolicy, engine: Engine, *, trainable: bool = False
) -> tuple[SamplingParams, dict[str, Any]]:
    """Checks the client's sampling fields, then fills in defaults and forced values and,
    for a `trainable` model, applies `check_trained_sampling` to what will run; returns
    the parameters and the overrides ({field: value used})."""
    temperature = 1.0 if s.temperature is None else s.temperature
    top_p = 1.0 if s.top_p is None else s.top_p
    params = SamplingParams(
        temperature=temperature, top_p=top_p,
        max_tokens=policy.default_max_tokens if s.max_tokens is None else s.max_tokens,
        stop_token_ids=tuple(s.stop_token_ids), stop=tuple(s.stop), seed=s.seed,
        top_logprobs=s.top_logprobs, structural_tag=s.structural_tag,
    )
    check_sampling(params, engine.vocab_size, prefix="sampling")
    overridden: dict[str, Any] = {}
    if policy.force_temperature is not None and temperature != policy.force_temperature:
        temperature = policy.force_temperature
        if s.temperature is not None:
            overridden["temperature"] = temperature
    if policy.force_top_p is not None and top_p != policy.force_top_p:
        top_p = policy.force_top_p
        if s.top_p is not None:
            overridden["top_p"] = top_p
    if (temperature, top_p) != (params.temperature, params.top_p):  # a forced value
        params = dataclasses.replace(params, temperature=temperature, top_p=top_p)
    if trainable:
        check_trained_sampling(params, forced=top_p != (1.0 if s.top_p is None else s.top_p))
    return params, overridden


def resolve_prompt(
    host: ModelHost,
    *,
    messages: list[Message] | None,
    tools: list[Message] | None,
    token_ids: list[int] | None,
    earlier_calls: Sequence[CallRecord],
    input_field: str,
    annotations: Annotations | None = None,
) -> tuple[list[int], dict[str, Any] | None, str]:
    """The prompt's exact ids, the chat to record (None for token input) and its rendered
    text. `earlier_calls` are the episode's calls of this model, which a chat extends;
    `annotations` are kept in the chat record (see `EpisodeRegistry.generate`)."""
    engine = host.engine
    if messages is not None:
        # Cheap checks first: a prompt too long for the context is refused from its
        # size in bytes, before the chat template and the tokenizer see it.
        n_bytes = check_chat(messages, tools, input_field)
        check_prompt_bytes(n_bytes, host.tokenizer, engine.max_model_len, input_field)
        validate_messages(messages, f"{input_field}.messages")
        rendered = render_prompt(
            host.tokenizer, messages, tools, earlier_calls, engine.eos_token_ids
        )
        chat: dict[str, Any] = {"messages": messages, "tools": tools or None, "reply": None,
                "fork_reason": rendered.fork_reason}
        if annotations:
            chat["annotations"] = annotations
        return rendered.prompt_ids, chat, rendered.text
    if token_ids is not None:
        prompt_ids = check_prompt_ids(
            token_ids, engine.vocab_size, engine.max_model_len,
            field=f"{input_field}.token_ids", per_token=True, context_field=input_field,
        )
        return prompt_ids, None, ""
    raise invalid(input_field, "give chat messages or token ids")


def fit_to_context(
    max_tokens: int, requested_max_tokens: int | None, n_prompt: int, max_model_len: int,
    input_field: str,
) -> int:
    """`max_tokens` cut to the room the prompt leaves; a prompt that leaves none, or a
    client's max_tokens that does not fit, is refused."""
    room = max_model_len - n_prompt
    if room <= 0:
        raise invalid(
            input_field, f"prompt is {n_prompt} tokens; the model's context is {max_model_len}"
        )
    if requested_max_tokens is not None and requested_max_tokens > room:
        raise invalid(
            "sampling.max_tokens",
            f"{requested_max_tokens} + prompt of {n_prompt} tokens exceeds the "
            f"context of {max_model_len}",
        )
    return min(max_tokens, room)


def resolve(
    host: ModelHost,
    policy: GenerationPolicy,
    sampling: SamplingRequest,
    *,
    messages: list[Message] | None = None,
    tools: list[Message] | None = None,
    token_ids: list[int] | None = None,
    earlier_calls: Sequence[CallRecord] = (),
    input_field: str = "input",
    affinity_key: str = "",
    annotations: Annotations | None = None,
) -> ResolvedRequest:
    """The one resolution step (see the module doc): sampling, then prompt, then the
    context's room. `affinity_key` routes the call's replicas (the episode id);
    `annotations` are kept with a chat call's record."""
    params, overridden = resolve_sampling(sampling, policy, host.engine,
                                          trainable=host.trainable)
    prompt_ids, chat, rendered_text = resolve_prompt(
        host, messages=messages, tools=tools, token_ids=token_ids,
        earlier_calls=earlier_calls, input_field=input_field, annotations=annotations,
    )
    max_tokens = fit_to_context(
        params.max_tokens, sampling.max_tokens, len(prompt_ids), host.engine.max_model_len,
        input_field,
    )
    params = dataclasses.replace(params, max_tokens=max_tokens, affinity_key=affinity_key)
    return ResolvedRequest(
        prompt_ids=prompt_ids, params=params, overridden=overridden, chat=chat,
        rendered_text=rendered_text,
    )
