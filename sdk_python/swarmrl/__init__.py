"""swarmrl: train LLM agents with reinforcement learning while the agents run anywhere.

This package is the client SDK. It talks to a swarm server over gRPC: start an
episode, let the agent call the server's models through it (every call recorded
with its exact token ids), report a reward, and end it.

.. code-block:: python

    import swarmrl

    with swarmrl.SwarmClient("127.0.0.1:50051") as client:
        with client.episode(task_id="task-7") as ep:
            completion = ep.chat([{"role": "user", "content": "What is 2+2?"}])
            ep.reward(1.0 if "4" in completion.text else 0.0)

`AsyncSwarmClient` is the same client for asyncio code. `swarmrl.testing` holds
an in-process fake server for testing agents without a model.
"""

from swarmrl._client import AsyncSwarmClient
from swarmrl._config import ClientConfig, TLSConfig
from swarmrl._episode import AsyncEpisode
from swarmrl._errors import (
    AbortedError,
    AlreadyExistsError,
    CancelledError,
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ResourceExhaustedError,
    StreamInterruptedError,
    SwarmError,
    UnauthenticatedError,
    UnavailableError,
    UnimplementedError,
    UnknownError,
    from_grpc_error,
)
from swarmrl._retry import RetryPolicy
from swarmrl._sampling import SamplingOptions, SamplingParams
from swarmrl._streams import AsyncCompletionStream, AsyncEventStream
from swarmrl._sync import CompletionStream, Episode, EventStream, SwarmClient
from swarmrl._types import (
    AgentVersionInfo,
    CallRecord,
    ChatMessage,
    ClientInfo,
    ClientList,
    Completion,
    Draining,
    EpisodeInfo,
    EpisodeState,
    Event,
    FinishReason,
    GenerationChunk,
    ModelInfo,
    Pausing,
    PolicyVersionChanged,
    Resumed,
    ServerStatus,
    Tool,
    TrainingHold,
    TrainingState,
    Usage,
)
from swarmrl._version import __version__

__all__ = [
    "AbortedError",
    "AgentVersionInfo",
    "AlreadyExistsError",
    "AsyncCompletionStream",
    "AsyncEpisode",
    "AsyncEventStream",
    "AsyncSwarmClient",
    "CallRecord",
    "CancelledError",
    "ChatMessage",
    "ClientConfig",
    "ClientInfo",
    "ClientList",
    "Completion",
    "CompletionStream",
    "DeadlineExceededError",
    "Draining",
    "Episode",
    "EpisodeInfo",
    "EpisodeState",
    "Event",
    "EventStream",
    "FailedPreconditionError",
    "FinishReason",
    "GenerationChunk",
    "InternalError",
    "InvalidArgumentError",
    "ModelInfo",
    "NotFoundError",
    "OutOfRangeError",
    "Pausing",
    "PermissionDeniedError",
    "PolicyVersionChanged",
    "ResourceExhaustedError",
    "Resumed",
    "RetryPolicy",
    "SamplingOptions",
    "SamplingParams",
    "ServerStatus",
    "StreamInterruptedError",
    "SwarmClient",
    "SwarmError",
    "TLSConfig",
    "Tool",
    "TrainingHold",
    "TrainingState",
    "UnauthenticatedError",
    "UnavailableError",
    "UnimplementedError",
    "UnknownError",
    "Usage",
    "__version__",
    "from_grpc_error",
]
