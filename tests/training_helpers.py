"""A toy training set and the loss, token count and optimiser settings the training-loop tests share
(tests/components/training/test_training.py, test_precision.py, test_train_processes.py)."""

from __future__ import annotations

from components.config.training import OptimConfig
from components.lm.forward import turn_logprob_sums
from components.lm.sequences import action_sequence, collate

EXAMPLES = [action_sequence([5 + i, 6], [7, 8 + i]) for i in range(12)]


def nll(model, part):
    batch = collate(part, 0)
    loss = -turn_logprob_sums(model, batch).sum() / batch.counts.sum()
    return loss, {"nll": loss.item()}


def tokens(part):
    return sum(len(s.ids) for s in part)


def optim(**over):
    values = dict(
        lr=1e-2,
        epochs=2,
        batch_size=4,
        micro_batch_size=2,
        warmup_ratio=0.25,
        min_lr_ratio=0.1,
        checkpoint_every=2,
        keep_checkpoints=1,
    )
    return OptimConfig(**(values | over))
