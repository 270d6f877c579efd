"""`OpenAIServingCompletion`: raw prompts (text or token ids) through the registry.

No chat template and no tool parsing: the text the model generated is returned as
is. Token-id prompts are the token-in path for agents that render their own
prompts; each choice is recorded as a call with exactly these ids. The pipeline
(episode, choices, errors, the stream's lifecycle) is `http.serving`'s.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from swarmrl_server.episodes.call_path import GenerateCall
from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.hosting import ModelHost
from swarmrl_server.http.completion.protocol import (
    CompletionChoice,
    CompletionLogprobs,
    CompletionRequest,
    CompletionResponse,
)
from swarmrl_server.http.errors import HttpError, openai_stream_error
from swarmrl_server.http.generation import TokenText, sampling_for_choices
from swarmrl_server.http.protocol import Usage
from swarmrl_server.http.serving import (
    ChoiceState,
    Piece,
    Plan,
    Refusal,
    ServingGeneration,
    openai_finish,
    results_of,
    swarmrl_info,
)
from swarmrl_server.http.sse import sse
from swarmrl_server.limits import check_prompt_bytes, utf8_size
from swarmrl_server.security import IN_PROCESS
from swarmrl_server.store.records import EpisodeRecord

PARAMS = {"sampling": "", "input.token_ids": "prompt", "input": "prompt"}
REFUSALS = (
    Refusal("echo", "not supported by this server", lambda r: r.echo),
    Refusal("suffix", "not supported by this server", lambda r: r.suffix),
    Refusal("best_of", "only best_of == n is supported",
            lambda r: r.best_of not in (None, 1, r.n)),
)


def prompts_of(req: CompletionRequest, host: ModelHost) -> list[list[int]]:
    """The request's prompts as token ids (text is refused from its size before the
    tokenizer sees it)."""
    p = req.prompt
    if isinstance(p, str):
        items: list[Any] = [p]
    elif p and all(isinstance(x, int) for x in p):
        items = [p]
    else:
        items = list(p)
    if not items:
        raise HttpError(400, "prompt: must not be empty", param="prompt")
    for i, x in enumerate(items):
        if isinstance(x, str):
            where = "prompt" if len(items) == 1 else f"prompt[{i}]"
            check_prompt_bytes(utf8_size(x, where), host.tokenizer, host.engine.max_model_len,
                               where)
    return [list(host.tokenizer(x)["input_ids"]) if isinstance(x, str) else list(x)
            for x in items]


def logprobs_of(req: CompletionRequest, tt: TokenText | None, ids: Sequence[int],
                lps: Sequence[float], tops: Sequence[Sequence[tuple[int, float]]],
                offset: int) -> CompletionLogprobs | None:
    if req.logprobs is None or tt is None:
        return None
    tokens = [tt.text(t) for t in ids]
    offsets, at = [], offset
    for tok in tokens:
        offsets.append(at)
        at += len(tok)
    return CompletionLogprobs(
        tokens=tokens, token_logprobs=list(lps), text_offset=offsets,
        top_logprobs=[{tt.text(a): alp for a, alp in (tops[i] if i < len(tops) else [])}
                      for i in range(len(ids))] if req.logprobs else None,
    )


def usage_of(results: list[GenerationResult], n: int) -> Usage:
    # Choices are grouped by prompt (n per prompt); like OpenAI, count each prompt once.
    prompt = sum(len(r.call.prompt_ids) for r in results[::n])
    completion = sum(len(r.call.completion_ids) for r in results)
    return Usage(prompt_tokens=prompt, completion_tokens=completion,
                 total_tokens=prompt + completion)


class OpenAIServingCompletion(ServingGeneration[CompletionRequest]):
    """Serves `/v1/completions` for the episode the request's key addresses."""

    door = "completion"
    refusals = REFUSALS
    stream_trailer = (sse("[DONE]"),)

    def params(self, req: CompletionRequest) -> Mapping[str, str]:
        return PARAMS

    def plan(self, req: CompletionRequest, episode: EpisodeRecord,
             host: ModelHost) -> Plan[CompletionRequest]:
        prompts = prompts_of(req, host)
        samplings = sampling_for_choices(
            req.n, temperature=req.temperature, top_p=req.top_p, max_tokens=req.max_tokens,
            stop=req.stop, seed=req.seed, top_logprobs=req.logprobs or 0,
        )
        calls = [GenerateCall(
            episode.episode_id, IN_PROCESS, model=host.name, token_ids=ids, sampling=s,
            request_id=f"{req.request_id}/{p}/{i}" if req.request_id else "")
            for p, ids in enumerate(prompts) for i, s in enumerate(samplings)]
        return Plan(req, episode.episode_id, host, calls, PARAMS, tt=TokenText(host.tokenizer),
                    response_id=f"cmpl-{uuid.uuid4().hex}")

    def render(self, plan: Plan[CompletionRequest], results: list[GenerationResult]) -> Any:
        req = plan.req
        choices = [
            CompletionChoice(
                index=i, text=r.call.text, finish_reason=openai_finish(False, r),  # type: ignore[arg-type]
                logprobs=logprobs_of(req, plan.tt, r.call.completion_ids, r.call.logprobs,
                                     r.call.top_logprobs, 0),
                prompt_token_ids=list(r.call.prompt_ids) if req.return_token_ids else None,
                token_ids=list(r.call.completion_ids) if req.return_token_ids else None,
            )
            for i, r in enumerate(results)
        ]
        return CompletionResponse(
            id=plan.response_id, model=req.model, choices=choices,
            usage=usage_of(results, req.n), swarmrl=swarmrl_info(plan.episode_id, results),
        ).dump()

    def render_piece(self, plan: Plan[CompletionRequest], state: ChoiceState, piece: Piece,
                     states: list[ChoiceState]) -> Iterable[str]:
        req = plan.req
        r = piece.result
        if r is None and not piece.text and not req.return_token_ids and req.logprobs is None:
            return ()
        out = CompletionResponse(id=plan.response_id, created=plan.created, model=req.model,
                                 choices=[CompletionChoice(
            index=state.index, text=piece.text,
            finish_reason=openai_finish(False, r) if r is not None else None,  # type: ignore[arg-type]
            logprobs=logprobs_of(req, plan.tt, piece.token_ids, piece.logprobs,
                                 piece.top_logprobs, piece.offset),
            prompt_token_ids=list(r.call.prompt_ids) if r and req.return_token_ids else None,
            token_ids=list(piece.token_ids) if req.return_token_ids else None,
        )])
        if r is not None and all(s.result is not None for s in states):
            out.swarmrl = swarmrl_info(plan.episode_id, results_of(states))
        return (sse(out.dump()),)

    def stream_close(self, plan: Plan[CompletionRequest], states: list[ChoiceState]) -> Iterable[str]:
        req = plan.req
        if req.stream_options and req.stream_options.include_usage:
            usage = CompletionResponse(id=plan.response_id, created=plan.created, model=req.model,
                                       choices=[], usage=usage_of(results_of(states), req.n))
            return (sse(usage.dump()),)
        return ()

    def stream_error(self, plan: Plan[CompletionRequest], err: HttpError) -> str:
        return openai_stream_error(err)
