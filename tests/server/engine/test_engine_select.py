"""Engine selection: `--engine`, `SOURCE@ENGINE`, `--engine-url`, and the echo engine
behind the real front doors."""

from __future__ import annotations

from pathlib import Path

import pytest

from swarmrl_server.engine.echo import EchoEngine
from tests.http_support import start_episode
from tests.server_fixtures import ServerFactory
from tests.store_support import stored_calls


def test_engine_flags_pick_an_engine_per_model() -> None:
    from swarmrl_server.cli import build_parser, config_from_args

    def models(*argv: str):
        return config_from_args(build_parser().parse_args(list(argv))).models

    assert [(m.name, m.engine) for m in models()] == [("tiny", "hf")]
    assert [(m.name, m.engine) for m in models("--model", "a=tiny@vllm", "--model", "b=tiny",
                                               "--engine", "echo")] == [("a", "vllm"), ("b", "echo")]
    (m,) = models("--model", "p=tiny", "--engine", "vllm", "--engine-url", "http://127.0.0.1:9/",
                  "--engine-url", "p=http://127.0.0.1:10")
    assert m.urls == ("http://127.0.0.1:9", "http://127.0.0.1:10")
    with pytest.raises(SystemExit, match="runs on hf"):
        models("--model", "p=tiny", "--engine-url", "p=http://127.0.0.1:9")
    help_text = build_parser().format_help()
    assert "--engine {hf,vllm,echo}" in help_text and "@ENGINE" in help_text


async def test_echo_engine_serves_the_http_door(make_server: ServerFactory,
                                                model_cache: Path) -> None:
    """`--engine echo` through the real server: the OpenAI client gets the echo's tokens."""
    import openai

    from swarmrl_server.cli import build_parser, config_from_args

    args = build_parser().parse_args(["--model", "tiny", "--engine", "echo", "--port", "0",
                                      "--http-port", "0", "--cache-dir", str(model_cache)])
    running = await make_server(config_from_args(args))
    assert isinstance(running.swarm.models["tiny"].engine, EchoEngine)
    ep = await start_episode(running)
    client = openai.AsyncOpenAI(base_url=ep.base_url, api_key=ep.key, max_retries=0)
    r = await client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Echo these words back"}],
        max_tokens=40, extra_body={"return_token_ids": True},
    )
    choice = r.choices[0]
    assert choice.finish_reason == "stop" and len(choice.token_ids) == 17  # 16 + end of turn
    tok = running.swarm.models["tiny"].tokenizer
    assert choice.message.content == tok.decode(choice.token_ids[:-1], skip_special_tokens=True)
    (call,) = await stored_calls(running, ep.episode_id)
    assert call.completion_ids == choice.token_ids and call.logprobs[-1] == 0.0
