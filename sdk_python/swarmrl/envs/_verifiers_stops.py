"""The ``@stop`` `swarmrl.envs.verifiers` plugs into every verifiers task it plays.

verifiers' chat programs send a reply's tool calls back in the next turn's messages,
whatever their arguments. A call cut by the token limit (``finish_reason`` "length")
has arguments that are not JSON, and the swarm server refuses such a message (400), so
the rollout would fail as if the environment had. The cut is the policy's doing: this
stop ends the trace before that next model call. verifiers treats a stopped trace as
finished (the harness's exit is expected, the task scores it), and ``Trace.is_truncated``
says it was cut.

No ``from __future__ import annotations`` here: verifiers picks a stop's boundary from
its parameter's annotation, resolved with ``typing.get_type_hints``.
"""

from verifiers.v1.trace import Trace

__all__ = ["swarmrl_cut_tool_call"]


def swarmrl_cut_tool_call(trace: Trace) -> bool:
    """Whether the trace's latest answered model call was cut by the token limit with a
    tool call in its reply (checked by verifiers before each model call)."""
    last = next((c for c in reversed(trace.calls) if c.error is None), None)
    if last is None or last.finish_reason != "length" or last.node is None:
        return False
    return bool(getattr(trace.nodes[last.node].message, "tool_calls", None))
