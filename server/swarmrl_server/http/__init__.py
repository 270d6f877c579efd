"""The OpenAI- and Anthropic-compatible HTTP shim: unmodified agents, exact tokens.

Layout (after vLLM's entrypoints): one package per endpoint, each with
`api_router.py` (thin FastAPI routes), `protocol.py` (pydantic models) and
`serving.py` (the handler class); `app.py` builds the app and runs uvicorn in the
server's event loop.

Endpoints (also under `/k/<episode key>/...`, for harnesses that cannot set a key):

- `POST /v1/chat/completions`  streaming (SSE, token by token, ends with `[DONE]`) or not
- `POST /v1/completions`       text or token-id prompts
- `GET  /v1/models`, `GET /v1/models/{id}`
- `POST /v1/messages`, `POST /v1/messages/count_tokens`   Anthropic Messages API
- `POST /v1/responses`, `GET /v1/responses/{id}`           OpenAI Responses API (the
  OpenAI Agents SDK's default model): input items, function tools, forced tool
  choices and JSON text formats, the streamed event sequence, `previous_response_id`
  with responses stored inside their episode (see `responses/store.py`)
- `GET  /health`

Addressing: `StartEpisode` returns `openai_base_url` and `openai_api_key`
(`sk-swarm-<episode id>.<mac>`). Every call made with the key lands in that episode
(`Authorization: Bearer <key>`, or `x-api-key: <key>` for Anthropic clients, or
`X-Swarmrl-Episode: <key>`, which wins over both: one client with one base URL and
its own key can play every episode of a run). Bad key: 401; ended/aborted episode:
409; a model the episode was not started with: 404. A call made while its model is
paused waits for the pause to lift (up to `--pause-wait`), then gets 429.

Extension fields (ignored by plain clients, opt-in where they cost bytes):

- request `return_token_ids: true` -> `prompt_token_ids` (the exact prompt ids the
  engine saw) and `token_ids` (the generated ids, stop token included) on the
  response: per choice for chat/completions, on the message for /v1/messages. In
  streams each chunk carries its own `token_ids`; `prompt_token_ids` comes on the
  chunk that finishes the first choice (on `message_delta` for Anthropic).
- request `request_id: "..."` -> idempotent retries: a repeat returns the recorded call.
- Responses API: request `seed` (chat completions' `seed`; the Responses API has none);
  `return_token_ids` and `swarmrl` are on the response object (streams: on
  `response.completed` / `response.incomplete`).
- response `swarmrl`: `{episode_id, call_ids, policy_version, version_spans, overridden,
  fork_reason}` always (streams: on the last finishing chunk / `message_delta`). `overridden` lists
  sampling fields the server's policy replaced (e.g. `--force-temperature`), with the
  value used: overrides are reported, never silent. `fork_reason` says why the prompt
  could not extend an earlier call's exact tokens (edited history, changed tools).
  `version_spans`: per choice, `[[version, start, end], ...]` over its completion tokens
  (one span unless weights changed mid-call); `policy_version` is the last token's.
- `/v1/models` entries carry `policy_version`, `max_model_len`, `trainable`.

Tool calls: `tools` go into the chat template (Hermes/Qwen2.5 style); replies are
parsed from `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` blocks
(`episodes.chat.ReplyParser`); streams hold such a block back and emit one
`tool_calls` delta with id, name and arguments when it closes. `tool_choice`
"auto" and "none" (tools hidden from the model, reply returned as raw text) are
supported; "required" and named functions need constrained decoding and are
refused with a 400 naming `tool_choice`, as are other options the server cannot
honour (penalties, logit_bias, JSON response formats, parallel_tool_calls=false).

Sampling: temperature, top_p, max_tokens / max_completion_tokens, stop, seed, n,
logprobs / top_logprobs. Choice i of a seeded request samples with `seed + i`. Every
other sampling setting (top_k, min_p, typical_p, top_a, repetition / presence /
frequency / length penalties, logit_bias, min_tokens) is refused on every door with a
400 naming it unless at its neutral value (`protocol.REFUSED_UNLESS_NEUTRAL` says why), and
so are vLLM's extras (guided_json / regex / choice / grammar, structured_outputs,
allowed_token_ids, bad_words, ignore_eos, use_beam_search, truncate_prompt_tokens:
`protocol.VLLM_EXTRAS_REFUSED`). A trainable model refuses top_p < 1 at temperature > 0
(400 naming top_p): its recorded logprobs could not represent the nucleus
(`episodes.resolve.check_trained_sampling`, the rule of every engine and door).
"""
