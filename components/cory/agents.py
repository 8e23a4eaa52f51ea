"""CORY's agents: LoRA adapters on ONE frozen base model, each with its own value head, AdamW and
reward-shaping state.

Reads: the base model folder. Writes: merged HF folders (`export_merged`) when asked.

Ma et al. 2024 duplicate the LLM into two agents with separate parameters; we take the cheaper
form the issue allows: one frozen base with two PEFT LoRA adapters ("agent0", "agent1";
`add_adapter`/`set_adapter`), so an agent is an adapter name, a value head and an optimizer. The
base with adapters disabled is the frozen initial model pi_0 of the KL penalty. At start every
LoRA B matrix is zero, so both agents and pi_0 are the same policy.

Value head (as TRL's AutoModelForCausalLMWithValueHead, without its dropout): a linear layer on
the last hidden state (after the final norm), initialised to zero (V = 0 at start). Its loss also
trains the agent's adapter (shared backbone, weighted by vf_coef), as in TRL. The optimizer is AdamW
with fp32 master weights for any bf16 parameter (training/precision.py; PEFT already upcasts LoRA
adapters to fp32 on a bf16 base, checked in tests) at `cfg.learning_rate` (cory.lr for CORY,
cory.ppo_lr for the PPO baseline). The shaping state (components.cory.shaping: KL coefficient,
running score moments) is per agent and saved with it.

Roles: `roles_at` is a pure function of the iteration: agent0 is the pioneer for iterations
1..T, agent1 for T+1..2T, and so on. Exchanging roles only changes which agent is asked to
answer first; each agent keeps its adapter, value head, optimizer AND shaping state (the authors'
code re-creates its trainers at every exchange and so loses the Adam moments, and with shaping trl
resets the KL coefficient and the score statistics).
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from components.config.cory import CoryConfig
from components.config.training import Algo
from components.cory.shaping import ShapingState, initial_state
from components.training.precision import MasterAdamW

PIONEER, OBSERVER, POLICY = "pioneer", "observer", "policy"


@dataclass
class Agent:
    """One trainable agent: the adapter's name, its value head, its optimizer and its shaping state."""

    name: str
    value_head: torch.nn.Linear
    optimizer: MasterAdamW
    shaping: ShapingState

    def parameters(self) -> list[torch.nn.Parameter]:
        """The model's parameters this agent trains (not the optimizer's fp32 copies of them)."""
        return self.optimizer.model_params


def agent_names(algo: Algo) -> list[str]:
    return ["agent0", "agent1"] if algo == Algo.cory else ["agent0"]


def roles_at(iteration: int, algo: Algo, exchange_every: int) -> dict[str, str]:
    """role -> agent name at `iteration` (1-based). CORY: agent0 pioneers in blocks 0, 2, 4... of
    `exchange_every` iterations, agent1 in the others; PPO: agent0 is the only policy."""
    if algo == Algo.ppo:
        return {POLICY: "agent0"}
    swapped = ((iteration - 1) // exchange_every) % 2 == 1
    return {PIONEER: "agent1", OBSERVER: "agent0"} if swapped else {PIONEER: "agent0", OBSERVER: "agent1"}


class AgentPool:
    """The frozen base model, one LoRA adapter + value head + optimizer per agent, the tokenizer."""

    def __init__(self, cfg: CoryConfig, names: list[str]) -> None:
        from peft import LoraConfig, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from components.training.models import train_device_dtype

        self.device, dtype = train_device_dtype(cfg.dtype)
        self.tokenizer = AutoTokenizer.from_pretrained(cfg.model)
        base = AutoModelForCausalLM.from_pretrained(cfg.model, dtype=dtype)
        base.requires_grad_(False)
        lora = LoraConfig(
            r=cfg.lora.r,
            lora_alpha=cfg.lora.alpha,
            lora_dropout=cfg.lora.dropout,
            target_modules=list(cfg.lora.target_modules),
            task_type="CAUSAL_LM",
        )
        torch.manual_seed(cfg.seed)  # LoRA A matrices are random; B starts at zero
        self.model = get_peft_model(base, lora, adapter_name=names[0])
        for name in names[1:]:
            self.model.add_adapter(name, lora)
        self.model.to(self.device).eval()
        hidden = self.model.config.hidden_size
        self.agents: dict[str, Agent] = {}
        for name in names:
            head = torch.nn.Linear(hidden, 1).to(self.device)  # fp32 even when the base is bf16
            torch.nn.init.zeros_(head.weight)
            torch.nn.init.zeros_(head.bias)
            params = self.adapter_parameters(name) + list(head.parameters())
            optimizer = MasterAdamW(params, lr=cfg.learning_rate, weight_decay=0.0)
            self.agents[name] = Agent(name, head, optimizer, initial_state(cfg))
        self.activate(names[0])

    def adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        """The LoRA matrices of adapter `name` (peft names them '...lora_A.<name>.weight')."""
        params = [p for key, p in self.model.named_parameters() if "lora_" in key and f".{name}." in key]
        if not params:
            raise ValueError(f"no LoRA parameters for adapter {name!r}")
        return params

    def activate(self, name: str) -> Agent:
        """Make `name` the adapter every forward pass uses (peft also sets requires_grad on it only)."""
        if self.model.active_adapter != name:
            self.model.set_adapter(name)
        return self.agents[name]

    def reference(self) -> contextlib.AbstractContextManager:
        """Context in which the model is the frozen base pi_0 (every adapter disabled)."""
        return self.model.disable_adapter()

    def state_dict(self) -> dict:
        """Adapters, value heads, optimizer and shaping states of every agent (what a checkpoint holds)."""
        from peft import get_peft_model_state_dict

        return {
            name: {
                "adapter": get_peft_model_state_dict(self.model, adapter_name=name),
                "value_head": agent.value_head.state_dict(),
                "optimizer": agent.optimizer.state_dict(),
                "shaping": agent.shaping.state_dict(),
            }
            for name, agent in self.agents.items()
        }

    def load_state_dict(self, state: dict) -> None:
        from peft import set_peft_model_state_dict

        if set(state) != set(self.agents):
            raise ValueError(f"checkpoint holds agents {sorted(state)}, this run has {sorted(self.agents)}")
        for name, agent in self.agents.items():
            result = set_peft_model_state_dict(self.model, state[name]["adapter"], adapter_name=name)
            unused = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
            if unused:
                raise ValueError(f"adapter {name}: checkpoint keys not in the model: {unused[:3]}")
            agent.value_head.load_state_dict(state[name]["value_head"])
            agent.optimizer.load_state_dict(state[name]["optimizer"])
            agent.shaping = ShapingState.from_dict(state[name]["shaping"])

    def merged_weights(self, name: str) -> dict[str, torch.Tensor]:
        """HF parameter name -> base weight + adapter `name`'s delta (scale * B @ A), for every weight
        the adapter touches: what a serving engine needs to become agent `name` (the rest is the base)."""
        from peft.tuners.lora import LoraLayer

        out: dict[str, torch.Tensor] = {}
        with torch.no_grad():
            for key, module in self.model.get_base_model().named_modules():
                if isinstance(module, LoraLayer) and name in module.lora_A:
                    base = module.get_base_layer().weight
                    out[f"{key}.weight"] = base + module.get_delta_weight(name).to(base.dtype)
        return out

    def export_merged(self, name: str, base_path: str, out: Path) -> Path:
        """Write agent `name` as a plain HF folder (atomically): a fresh copy of the base with
        `merged_weights` put in; the shared training model is left untouched."""
        from transformers import AutoModelForCausalLM

        merged = AutoModelForCausalLM.from_pretrained(base_path, dtype=self.model.get_base_model().dtype)
        with torch.no_grad():
            for key, weight in self.merged_weights(name).items():
                target = merged.get_parameter(key)
                target.copy_(weight.to(target.device, target.dtype))
        out = Path(out)
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        merged.save_pretrained(tmp)
        self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
        return out
