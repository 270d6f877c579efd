"""`VLLMEngine`: the same token-in/token-out interface over vLLM's AsyncLLM.

GPU PATH, UNTESTED ON CPU MACHINES. vLLM is an optional extra (`[gpu]`) that does
not install or run on the CPU machines this project is tested on, so this module
only imports vllm inside the class; importing the module itself is always safe.
Weight updates go through the model runner's `load_weights` (best effort: it
relies on vLLM's in-process executor exposing `collective_rpc`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

import torch

from swarmrl_server.engine.base import (
    Engine,
    GenerationChunk,
    GenerationOutput,
    SamplingParams,
)
from swarmrl_server.errors import Reason, invalid, unavailable


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise ImportError(
            "VLLMEngine needs vLLM on a GPU machine: pip install 'swarmrl[gpu]'"
        ) from exc
    return vllm


class VLLMEngine(Engine):
    """Serves a model with vLLM's AsyncLLM (continuous batching on GPU)."""

    def __init__(self, name: str, model_path: str, **engine_kwargs: Any) -> None:
        """`engine_kwargs` go to vLLM's AsyncEngineArgs (e.g. gpu_memory_utilization)."""
        self._vllm = _import_vllm()
        self.name = name
        self._model_path = model_path
        self._engine_kwargs = engine_kwargs
        self._llm: Any = None
        self._policy_version = 0
        from transformers import AutoConfig, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_path)
        config = AutoConfig.from_pretrained(model_path)
        self.max_model_len = int(
            engine_kwargs.get("max_model_len") or config.max_position_embeddings
        )
        self.vocab_size = int(config.vocab_size)
        eos = [self.tokenizer.eos_token_id, self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.eos_token_ids = tuple(
            dict.fromkeys(int(t) for t in eos if t is not None and t != self.tokenizer.unk_token_id)
        )

    @property
    def policy_version(self) -> int:
        return self._policy_version

    async def start(self) -> None:
        if self._llm is not None:
            return
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(model=self._model_path, **self._engine_kwargs)
        self._llm = AsyncLLM.from_engine_args(args)

    async def stop(self) -> None:
        if self._llm is not None:
            self._llm.shutdown()  # in-flight generate() calls end; we report "abort"
            self._llm = None

    async def generate(
        self, prompt_ids: Sequence[int], params: SamplingParams
    ) -> AsyncIterator[GenerationChunk | GenerationOutput]:
        if self._llm is None:
            raise unavailable(Reason.SHUTTING_DOWN, f"engine {self.name!r} is not running")
        prompt = [int(t) for t in prompt_ids]
        if not prompt or len(prompt) >= self.max_model_len:
            raise invalid("prompt_ids", f"need 1..{self.max_model_len - 1} tokens")
        vllm = self._vllm
        sampling = vllm.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=min(params.max_tokens, self.max_model_len - len(prompt)),
            stop_token_ids=list(params.stop_token_ids) + list(self.eos_token_ids),
            stop=list(params.stop),
            seed=params.seed,
            # vLLM returns the sampled token's logprob plus this many alternatives.
            logprobs=params.top_logprobs,
            output_kind=vllm.sampling_params.RequestOutputKind.DELTA,
        )
        version = self._policy_version
        request_id = uuid.uuid4().hex
        completion: list[int] = []
        logprobs: list[float] = []
        tops: list[list[tuple[int, float]]] = []
        text = ""
        finish = "abort"
        try:
            async for out in self._llm.generate(
                vllm.inputs.TokensPrompt(prompt_token_ids=prompt), sampling, request_id
            ):
                step = out.outputs[0]
                ids = list(step.token_ids)
                lps = [float(d[t].logprob) for t, d in zip(ids, step.logprobs or [])]
                alts = [
                    sorted(((k, float(v.logprob)) for k, v in d.items()), key=lambda kv: -kv[1])[
                        : params.top_logprobs
                    ]
                    for d in (step.logprobs or [])
                ]
                completion += ids
                logprobs += lps
                if params.top_logprobs:
                    tops += alts
                text += step.text
                yield GenerationChunk(ids, lps, step.text, alts if params.top_logprobs else [])
                if step.finish_reason is not None:
                    finish = "length" if step.finish_reason == "length" else "stop"
        except GeneratorExit:
            await self._llm.abort(request_id)
            raise
        yield GenerationOutput(
            prompt_ids=prompt,
            completion_ids=completion,
            logprobs=logprobs,
            text=text,
            finish_reason=finish,  # type: ignore[arg-type]
            policy_version=version,
            top_logprobs=tops,
        )

    async def update_weights(
        self, state_dict: Mapping[str, torch.Tensor], policy_version: int
    ) -> None:
        """Best effort: pauses new requests, loads weights in every worker, resumes."""
        if self._llm is None:
            raise unavailable(Reason.SHUTTING_DOWN, f"engine {self.name!r} is not running")
        weights = list(state_dict.items())

        def load(worker: Any) -> None:
            worker.model_runner.model.load_weights(weights=weights)

        await self._llm.reset_prefix_cache()
        await self._llm.collective_rpc(load)
        self._policy_version = policy_version
