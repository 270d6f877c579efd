"""The response object: the settings a request echoes, and a finished call as a response.

`GET /v1/responses/{id}` and `previous_response_id` rebuild a response from its
recorded call and the settings stored with it (`store.py`), with the same functions a
new response is rendered with.
"""

from __future__ import annotations

import hashlib
import time
import uuid

from swarmrl_server.episodes.calls import GenerationResult
from swarmrl_server.http.generation import TokenText
from swarmrl_server.http.responses.items import output_items
from swarmrl_server.http.responses.protocol import (
    IncompleteDetails,
    ResponseObject,
    ResponseSettings,
    ResponsesRequest,
    ResponsesUsage,
)
from swarmrl_server.http.serving import swarmrl_info

TOOL_FIELDS = {"type", "name", "description", "parameters", "strict"}
FORMAT_FIELDS = {"type", "name", "description", "schema_", "strict"}


def response_id(episode_id: str, request_id: str | None) -> str:
    """A new response's id; a retried request (same `request_id`) gets the same one."""
    if not request_id:
        return f"resp_{uuid.uuid4().hex}"
    return "resp_" + hashlib.sha256(f"{episode_id}\0{request_id}".encode()).hexdigest()[:32]


def settings_for(req: ResponsesRequest, episode_id: str) -> ResponseSettings:
    """What the response will echo of `req` (and what its call keeps, see `store.py`)."""
    fmt = req.text.format if req.text else None
    text_format = fmt.model_dump(by_alias=True, exclude_none=True, include=FORMAT_FIELDS) \
        if fmt else {"type": "text"}
    return ResponseSettings(
        id=response_id(episode_id, req.request_id), model=req.model, store=req.store,
        instructions=req.instructions, previous_response_id=req.previous_response_id,
        tools=[t.model_dump(include=TOOL_FIELDS, exclude_none=True) for t in req.tools or []],
        tool_choice=req.tool_choice or "auto",
        parallel_tool_calls=req.parallel_tool_calls is not False,
        max_output_tokens=req.max_output_tokens, temperature=req.temperature, top_p=req.top_p,
        top_logprobs=req.top_logprobs, metadata=req.metadata or {},
        text={"format": text_format},
    )


def finished(settings: ResponseSettings, result: GenerationResult, episode_id: str,
             tt: TokenText | None = None, token_ids: bool = False) -> ResponseObject:
    """The response object of a finished call (also what GET rebuilds from the call)."""
    c = result.call
    incomplete = result.finish_reason == "length"
    return ResponseObject(
        **settings.model_dump(), status="incomplete" if incomplete else "completed",
        completed_at=float(int(c.created_at or time.time())),
        incomplete_details=IncompleteDetails(reason="max_output_tokens") if incomplete else None,
        output=output_items(settings, result, tt),
        usage=ResponsesUsage(input_tokens=len(c.prompt_ids), output_tokens=len(c.completion_ids),
                             total_tokens=len(c.prompt_ids) + len(c.completion_ids)),
        prompt_token_ids=list(c.prompt_ids) if token_ids else None,
        token_ids=list(c.completion_ids) if token_ids else None,
        swarmrl=swarmrl_info(episode_id, [result]),
    )
