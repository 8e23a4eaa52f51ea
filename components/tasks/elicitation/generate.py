"""Generate the elicitation tasks: `python -m components.tasks.elicitation.generate`.

Reads: params `elicitation` (components/tasks/elicitation/config.py). Writes: `elicitation.file`
(JSONL of components/tasks/elicitation/task.py ElicitationRecord, the train rows then the eval rows;
written to a temporary file, then renamed) and prints one JSON line of counts.

Held out from training, so that eval measures generalisation: (a) the `heldout_domains` appear
only in eval; (b) in every other domain the slot-value combinations are split by a seeded shuffle,
`eval_combo_fraction` of them playing only in eval. Tasks go round-robin over a split's domains
(the first few eval tasks cover every domain), each domain's combinations in shuffled order,
reused only once all were used; request wording and 1-2 details are drawn per task. Every random
draw comes from `random.Random` seeded by a string of the config seed and its purpose, so the same
seed gives a byte-identical file and the draws of one split do not shift the other's.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter

from components.config.sections import load_section
from components.data.records import replace_jsonl
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.domains import DETAILS, DOMAINS
from components.tasks.elicitation.task import ElicitationRecord

Combo = tuple[str, ...]  # one value per slot, in slot order
MAX_REDRAWS = 100  # redraws of a task's wording and details before a duplicate task is an error


def combinations(domain: str) -> list[Combo]:
    """Every slot-value combination of `domain`, in a fixed order."""
    return list(itertools.product(*(s.values for s in DOMAINS[domain].slots)))


def partition(cfg: ElicitationConfig) -> tuple[dict[str, list[Combo]], dict[str, list[Combo]]]:
    """Per domain, the combinations of the train split and those of the eval split (disjoint)."""
    train: dict[str, list[Combo]] = {}
    evaluation: dict[str, list[Combo]] = {}
    for name in DOMAINS:
        combos = combinations(name)
        random.Random(f"{cfg.seed}/combos/{name}").shuffle(combos)
        if name in cfg.heldout_domains:
            evaluation[name] = combos
            continue
        cut = min(len(combos) - 1, max(1, round(len(combos) * cfg.eval_combo_fraction)))
        evaluation[name], train[name] = combos[:cut], combos[cut:]
    return train, evaluation


def draw(pools: dict[str, list[Combo]], count: int, split: str, seed: int) -> list[ElicitationRecord]:
    """`count` distinct tasks of `split`, round-robin over the pools' domains."""
    rng = random.Random(f"{seed}/{split}")
    names = list(pools)
    used: Counter[str] = Counter()
    seen: set[str] = set()
    records = []
    for i in range(count):
        name = names[i % len(names)]
        combo = pools[name][used[name] % len(pools[name])]
        used[name] += 1
        records.append(distinct_task(name, combo, split, rng, seen))
    return records


def distinct_task(name: str, combo: Combo, split: str, rng: random.Random, seen: set[str]) -> ElicitationRecord:
    """A task of `combo` whose id is not in `seen` (added to it), redrawing its wording and details."""
    slots = dict(zip((s.name for s in DOMAINS[name].slots), combo))
    for _ in range(MAX_REDRAWS):
        request = rng.choice(DOMAINS[name].requests)
        details = rng.sample(sorted(DETAILS), rng.randint(1, 2))
        record = ElicitationRecord(domain=name, request=request, slots=slots, details=details, split=split)
        if record.task_id not in seen:
            seen.add(record.task_id)
            return record
    raise ValueError(f"cannot draw another distinct {split} task of domain {name}: ask for fewer tasks")


def generate(cfg: ElicitationConfig) -> list[ElicitationRecord]:
    """The train tasks then the eval tasks, deterministic from `cfg.seed`."""
    train_pools, eval_pools = partition(cfg)
    train = draw(train_pools, cfg.train_tasks, "train", cfg.seed)
    evaluation = draw(eval_pools, cfg.eval_tasks, "eval", cfg.seed)
    return train + evaluation


def run(cfg: ElicitationConfig) -> dict:
    """Write the tasks to `cfg.file` atomically; return the counts."""
    records = generate(cfg)
    replace_jsonl(cfg.file, records)
    per_split = Counter(r.split for r in records)
    heldout = sum(r.domain in cfg.heldout_domains for r in records)
    return {"file": str(cfg.file), "train": per_split["train"], "eval": per_split["eval"], "heldout_eval": heldout}


def main() -> None:
    print(json.dumps(run(load_section(ElicitationConfig, "elicitation"))))


if __name__ == "__main__":
    main()
