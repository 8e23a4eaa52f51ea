"""CORY (Ma et al. 2024, arXiv 2410.06101): sequential cooperative two-agent RL fine-tuning.

`gsm8k` holds the task side (rows, gold answers, the last-number reward, pioneer/observer prompts);
`ppo_losses` holds the pure PPO math each agent is trained with (KL-penalised rewards, GAE,
clipped policy and value losses). See docs/algorithms.md, "CORY".
The training stage (`python -m components.stages.cory`) is built from: `config` (section `cory`),
`agents` (LoRA adapters on one frozen base, value heads, optimizers, roles), `rollout` (samples and
their scoring passes), `ppo` (one agent's update), `evaluation` (each agent alone on the test
slice), `serving` (engines on the agents' current weights) and `state` (checkpoint and resume).
"""
