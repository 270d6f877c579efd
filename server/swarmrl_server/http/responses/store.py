"""Stored responses: kept inside their episode, as part of the call that produced them.

A stored response is not a second record next to the call. The call's chat record
(`CallRecord.chat_json`: written by the registry before the call returns, durable in
the SQLite store, and restored with the open episode after a restart) carries, under
`annotations.response`, the `ResponseSettings` the response echoed: its id, `store`,
`instructions`, tools, `tool_choice`, text format, sampling fields and `metadata`.
Everything else (output items, status, usage) is derived from the call itself (its
reply with the tool call ids the client saw, its finish reason, its token ids), so
`GET /v1/responses/{id}` rebuilds the object that was returned, and
`previous_response_id` continues from the call's exact messages and reply: the next
prompt extends that call's token ids (invariant 1) and merges into its timeline.

Lookup is within the episode the request's key addresses, and nowhere else: its
calls are scanned newest first (the response being continued is nearly always the
latest), matching the id as a substring of the JSON before parsing it. An id from
another episode, a `store: false` response and an unknown id are all the same 404.
Stored responses live as long as their episode is open; an ended episode's key is
refused (409) like every other request made with it.
"""

from __future__ import annotations

from typing import Any

from swarmrl_server.episodes.calls import GenerationResult, replay
from swarmrl_server.episodes.registry import EpisodeRegistry
from swarmrl_server.episodes.render import chat_of
from swarmrl_server.http.errors import HttpError
from swarmrl_server.http.responses.protocol import ResponseSettings
from swarmrl_server.store.records import CallRecord

ANNOTATION = "response"
"""Key of the settings in the call's chat annotations."""


def call_annotations(settings: ResponseSettings) -> dict[str, Any]:
    """What `EpisodeRegistry.generate` keeps with the call for this response."""
    return {ANNOTATION: settings.model_dump(mode="json")}


def find(registry: EpisodeRegistry, episode_id: str, response_id: str,
         field: str) -> tuple[ResponseSettings, GenerationResult]:
    """The stored response `response_id` of the episode, as its settings and its call's
    result; a 404 naming `field` when the episode has no such stored response."""
    for call in reversed(registry.open_calls(episode_id)):
        if response_id not in call.chat_json:
            continue
        settings = settings_of(call)
        if settings is not None and settings.id == response_id and settings.store:
            return settings, replay(call)  # the call and its reply, as recorded
    raise HttpError(404, f"{field}: no stored response {response_id!r} in this episode",
                    param=field, code="response_not_found")


def settings_of(call: CallRecord) -> ResponseSettings | None:
    chat = chat_of(call) or {}
    stored = (chat.get("annotations") or {}).get(ANNOTATION)
    return None if stored is None else ResponseSettings.model_validate(stored)
