"""The tool-call parser shared by whole replies and streams (episodes.chat.ReplyParser)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from swarmrl_server.episodes.chat import ReplyParser, parse_reply


def call(name: str, **arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


REPLIES = [
    "plain text, no calls",
    "  Sure.\n" + call("f", x=1) + "\n" + call("g") + "  \n",
    "A <tool_call>not json</tool_call> B " + call("h") + "\nC ",
    "cut short <tool_call>{\"name\": \"f\"",
    "<tool_ca",
    'a <<tool_call>{"name": "q", "arguments": "{\\"a\\": 2}"}</tool_call>',
    call("f", text="has </tool_ in it"),
]


def test_whole_replies() -> None:
    message, finish = parse_reply(REPLIES[1], "stop")
    assert finish == "tool_calls"
    assert message["content"] == "  Sure."
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["f", "g"]
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"x": 1}
    message, finish = parse_reply(REPLIES[0], "stop")
    assert message == {"role": "assistant", "content": REPLIES[0]} and finish == "stop"
    # A malformed block stays in the content, verbatim; valid ones around it still parse.
    message, _ = parse_reply(REPLIES[2], "stop")
    assert message["content"] == "A <tool_call>not json</tool_call> B\nC "
    # Arguments sent as an encoded JSON string are normalised to an object.
    message, _ = parse_reply(REPLIES[5], "stop")
    assert message["content"] == "a <"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"a": 2}
    # An unfinished block (the completion hit max_tokens) is content; the reason stays.
    message, finish = parse_reply(REPLIES[3], "length")
    assert message["content"] == REPLIES[3] and finish == "length"


@settings(max_examples=300, deadline=None)
@given(reply=st.sampled_from(REPLIES), cuts=st.lists(st.integers(0, 200), max_size=12))
def test_streaming_agrees_with_whole_parsing_however_split(reply: str, cuts: list[int]) -> None:
    points = sorted({c % (len(reply) + 1) for c in cuts})
    pieces = [reply[a:b] for a, b in zip([0, *points], [*points, len(reply)])]
    parser = ReplyParser()
    content, calls = "", []
    for piece in pieces:
        text, done = parser.feed(piece)
        content += text
        calls += done
    content += parser.finish()
    whole, _ = parse_reply(reply, "stop")
    assert content == (whole["content"] or "")
    assert [c["function"] for c in calls] == [c["function"] for c in whole.get("tool_calls", [])]
