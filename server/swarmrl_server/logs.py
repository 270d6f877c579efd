"""Structured logs, and the request context every log line and metric sees.

A front door opens a `request_scope` per RPC or HTTP request: it binds the door, the
request id (the client's ``request_id``/``X-Request-Id``, or one made here) and
whatever ids the request names (episode, session) into structlog's contextvars. The
domain binds more as it learns them (`bind_ids`: the episode an API key addresses,
the id of the call being generated), so every line logged while serving the request
carries them, whichever module logs it.

Output is JSON lines when stderr is not a terminal (log shippers, files, CI) and
structlog's coloured console format on a terminal.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, TextIO

import structlog

DOORS = ("grpc", "http", "internal")
_DOOR: ContextVar[str] = ContextVar("swarmrl_door", default="internal")


def current_door() -> str:
    """The front door serving the current request: "grpc", "http" or "internal"."""
    return _DOOR.get()


def new_request_id() -> str:
    return f"req-{uuid.uuid4().hex[:16]}"


@contextlib.contextmanager
def request_scope(door: str, **ids: str) -> Iterator[None]:
    """Binds `door` and the non-empty `ids` for the duration of one request.

    Must be entered in the task that serves the request (each RPC and each HTTP request
    has its own), so nothing leaks into another request.
    """
    structlog.contextvars.clear_contextvars()
    token = _DOOR.set(door)
    bind_ids(door=door, **ids)
    try:
        yield
    finally:
        # A streaming handler may be closed from another context; the reset is then moot.
        with contextlib.suppress(ValueError):
            _DOOR.reset(token)
        structlog.contextvars.clear_contextvars()


def bind_ids(**ids: str) -> None:
    """Adds ids to the current request's log context (empty values are skipped)."""
    structlog.contextvars.bind_contextvars(**{k: v for k, v in ids.items() if v})


def configure(level: str = "info", *, json: bool | None = None,
              stream: TextIO | None = None) -> None:
    """Configures structlog for the server process.

    json: None picks JSON unless `stream` (default stderr) is a terminal.
    """
    stream = stream if stream is not None else sys.stderr
    if json is None:
        json = not stream.isatty()
    numeric = logging.getLevelName(level.upper())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: list[Any] = (
        [structlog.processors.dict_tracebacks, structlog.processors.JSONRenderer()] if json
        else [structlog.dev.ConsoleRenderer(colors=stream.isatty())])
    structlog.configure(
        processors=[*shared, *renderer],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # Libraries log through the standard library (uvicorn, grpc, transformers): the same
    # format and the same request ids for their lines too.
    handler = logging.StreamHandler(stream)
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[*shared, structlog.stdlib.add_logger_name],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, *renderer]))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(numeric)
    # The server runs uvicorn in process. A uvicorn.Config with its default log_config,
    # made anywhere in this process before (a library's server, a test's), gave uvicorn's
    # loggers handlers of their own and stopped them propagating: their lines would
    # bypass this format. They are the root's again.
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers, logger.propagate, logger.disabled = [], True, False
        logger.setLevel(logging.NOTSET)
