"""CORY (Ma et al. 2024, arXiv 2410.06101): sequential cooperative two-agent RL fine-tuning.

`gsm8k` holds the task side (rows, gold answers, the last-number reward, pioneer/observer prompts);
`ppo_losses` holds the pure PPO math each agent is trained with (KL-penalised rewards, GAE,
clipped policy and value losses). See ALGORITHMS.md, "CORY".
"""
