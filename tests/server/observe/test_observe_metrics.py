"""Prometheus /metrics on the HTTP shim, scraped during a short training run, and the
request context in structured logs."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import structlog
import uvicorn.config
from prometheus_client.parser import text_string_to_metric_families

import swarmrl
from swarmrl_server import logs
from tests.helpers import assert_eventually, wait_for_step
from tests.observe_support import TRAIN_OPTIONS
from tests.server_fixtures import ServerFactory


@pytest.fixture
async def training_server(make_server: ServerFactory) -> Any:
    # Packing on: the trainer then reports its packing ratio too.
    return await make_server(http=True, train={**TRAIN_OPTIONS, "packing": "true"})


async def scrape(base_url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of /metrics, parsed with prometheus_client's own parser."""
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{base_url}/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.text) for s in family.samples
    }


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    return sum(v for (n, ls), v in samples.items()
               if n == name and all(dict(ls).get(k) == w for k, w in labels.items()))


async def test_metrics_move_during_a_short_run(training_server: Any) -> None:
    base = training_server.http.base_url
    before = await scrape(base)
    assert value(before, "swarmrl_calls_total") == 0
    assert value(before, "swarmrl_policy_version", model="tiny") == 0

    async with swarmrl.AsyncSwarmClient(training_server.grpc_target) as client:
        for i in range(2):  # two episodes through gRPC: one batch, one step
            async with client.episode(task_id="quiz", group_id="g") as ep:
                # A long shared prompt: worth a shared segment in the trainer's packing plan.
                await ep.chat([{"role": "user", "content": "Tell me about fruit. " * 30}],
                              max_tokens=4, seed=i)
                await ep.reward(float(i))
        # One call through the OpenAI shim, in an episode we then abort.
        ep = await client.start_episode(task_id="side")
        async with httpx.AsyncClient(base_url=ep.openai_base_url) as http:
            r = await http.post("/chat/completions", json={
                "model": "tiny", "messages": [{"role": "user", "content": "Yo"}],
                "max_tokens": 3},
                headers={"Authorization": f"Bearer {ep.openai_api_key}"})
            assert r.status_code == 200, r.text
            bad = await http.post("/chat/completions", json={"model": "tiny"},
                                  headers={"Authorization": f"Bearer {ep.openai_api_key}"})
            assert bad.status_code == 400
        await ep.abort("done")
        with pytest.raises(swarmrl.NotFoundError):
            await client.get_episode("ep-missing")

    trainer = training_server.swarm.models["tiny"].trainer
    await wait_for_step(trainer, 1, timeout=120)
    after = await assert_eventually(_scraped_step(base), timeout=30)

    assert value(after, "swarmrl_calls_total", door="grpc", model="tiny") == 2
    assert value(after, "swarmrl_calls_total", door="http", model="tiny") == 1
    assert value(after, "swarmrl_tokens_total", door="grpc", kind="completion") > 0
    assert value(after, "swarmrl_tokens_total", door="http", kind="prompt") > 0
    assert value(after, "swarmrl_call_duration_seconds_count", door="grpc") == 2
    assert value(after, "swarmrl_time_to_first_token_seconds_count", door="http") == 1
    assert value(after, "swarmrl_episodes", state="ended") == 2
    assert value(after, "swarmrl_episodes", state="aborted") == 1
    assert value(after, "swarmrl_episodes", state="open") == 0
    assert value(after, "swarmrl_requests_total", door="grpc", method="Generate", code="OK") == 2
    assert value(after, "swarmrl_requests_total", door="grpc", method="GetEpisode",
                 code="NOT_FOUND") == 1
    assert value(after, "swarmrl_requests_total", door="http",
                 method="POST /v1/chat/completions", code="400") == 1
    assert value(after, "swarmrl_trainer_steps_total", model="tiny") >= 1
    assert value(after, "swarmrl_trainer_step_duration_seconds_count", model="tiny") >= 1
    assert value(after, "swarmrl_weight_sync_duration_seconds_count", model="tiny") >= 1
    assert value(after, "swarmrl_trainer_staleness_versions_count", model="tiny") >= 2
    assert value(after, "swarmrl_trainer_merge_token_ratio", model="tiny") >= 1.0
    # Two episodes with the same prompt: packing computes their common prefix once.
    assert value(after, "swarmrl_trainer_pack_token_ratio", model="tiny") > 1.0
    assert value(after, "swarmrl_policy_version", model="tiny") >= 1
    assert ("swarmrl_queue_depth", (("model", "tiny"), ("queue", "engine_waiting"))) in after
    assert ("swarmrl_queue_depth", (("model", "tiny"), ("queue", "trainer_pending"))) in after
    # Errors are kept for the live console too.
    recent = list(training_server.swarm.telemetry.recent_errors)
    assert {(e.door, e.code) for e in recent} >= {("grpc", "NOT_FOUND"), ("http", "400")}


def _scraped_step(base: str) -> Any:
    async def check() -> dict[Any, float]:
        samples = await scrape(base)
        assert value(samples, "swarmrl_trainer_steps_total", model="tiny") >= 1
        return samples
    return check


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """`logs.configure` sets process-wide state: undone after the test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.reset_defaults()
    root.handlers = handlers
    root.setLevel(level)


def test_logs_are_json_off_a_terminal_and_carry_the_request_ids(restore_logging: None) -> None:
    # As a uvicorn.Config with its default log_config leaves the process (any made before
    # the server configures logging): uvicorn's loggers on handlers of their own, not
    # propagating. configure() takes them back.
    logging.config.dictConfig(uvicorn.config.LOGGING_CONFIG)
    out = io.StringIO()  # not a terminal
    logs.configure("info", stream=out)
    log = structlog.get_logger("test")
    with logs.request_scope("grpc", request_id="req-1", episode_id="ep-1"):
        logs.bind_ids(call_id="call-1")
        log.info("generated", tokens=3)
        logging.getLogger("uvicorn.error").warning("library line %d", 7)
        assert logs.current_door() == "grpc"
    log.info("outside")
    assert logs.current_door() == "internal"
    first, library, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert (library["event"], library["level"], library["logger"]) == (
        "library line 7", "warning", "uvicorn.error")
    assert library["request_id"] == "req-1" and library["call_id"] == "call-1"
    assert first["event"] == "generated" and first["level"] == "info"
    assert (first["request_id"], first["episode_id"], first["call_id"], first["door"]) == (
        "req-1", "ep-1", "call-1", "grpc")
    assert "request_id" not in second and "timestamp" in second


def test_logs_are_pretty_on_a_terminal(restore_logging: None) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Tty()
    logs.configure("info", stream=out)
    with logs.request_scope("http", request_id="req-2"):
        structlog.get_logger("test").info("hello")
    line = out.getvalue()
    assert "hello" in line and "req-2" in line and not line.lstrip().startswith("{")


async def test_live_view_and_viewer_need_an_admin_key_when_keys_are_set(
        make_server: ServerFactory) -> None:
    running = await make_server(http=True, admin_keys=("adm-key",), client_keys=("cli-key",))
    async with httpx.AsyncClient(base_url=running.http.base_url) as http:
        assert (await http.get("/metrics")).status_code == 200  # scrapers carry no key
        for path in ("/swarmrl/live", "/view/"):
            assert (await http.get(path)).status_code == 401
            client = await http.get(path, headers={"Authorization": "Bearer cli-key"})
            assert client.status_code == 401
            admin = await http.get(path, headers={"Authorization": "Bearer adm-key"})
            assert admin.status_code == 200
        page = await http.get("/view/", params={"key": "adm-key"})
        assert page.status_code == 200 and "/view/?key=adm-key" in page.text  # links keep it


async def test_live_snapshot_is_one_message_over_grpc_and_as_json(
        make_server: ServerFactory) -> None:
    """GetLiveSnapshot (admin only) and GET /swarmrl/live answer the same LiveSnapshot."""
    running = await make_server(http=True, admin_keys=("adm-key",), client_keys=("cli-key",))
    admin = swarmrl.ClientConfig(target=running.grpc_target, api_key="adm-key")
    async with swarmrl.AsyncSwarmClient(config=admin) as client:
        async with client.episode(task_id="live") as ep:
            await ep.chat([{"role": "user", "content": "Hi"}], max_tokens=2)
            rpc = await client.live_snapshot()
            await ep.reward(1.0)
    plain = swarmrl.ClientConfig(target=running.grpc_target, api_key="cli-key")
    async with swarmrl.AsyncSwarmClient(config=plain) as client:
        with pytest.raises(swarmrl.PermissionDeniedError):
            await client.live_snapshot()
    async with httpx.AsyncClient(base_url=running.http.base_url) as http:
        response = await http.get("/swarmrl/live", headers={"Authorization": "Bearer adm-key"})
    assert response.status_code == 200
    page = response.json()
    # One call made and one episode open when the RPC answered; ended by the time of the page.
    assert rpc["totals"] == {"calls": 1.0, "prompt_tokens": rpc["totals"]["prompt_tokens"],
                             "completion_tokens": 2.0}
    assert [e["task_id"] for e in rpc["open_episodes"]] == ["live"]
    assert rpc["episodes"] == {"open": 1, "ended": 0.0, "aborted": 0.0}
    assert page["episodes"] == {"open": 0, "ended": 1.0, "aborted": 0.0}
    assert page["server_instance"] == rpc["server_instance"] and page["open_episodes"] == []
    assert page["totals"] == rpc["totals"]
    model = page["models"][0]
    assert model["name"] == "tiny" and "trainer" not in model  # not trained: left out
    assert model["engine_waiting"] == 0 and isinstance(model["policy_version"], int)
    assert set(page) == set(rpc)  # the same message, every field written
