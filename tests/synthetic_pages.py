"""A controlled frontend world (task colbench-frontend) where one question decides the design.

Each task's reference page is a title on a full-page background colour that the request does not
give. An episode asks `questions` questions drawn at random, then answers with a page: the page has
the task's colour iff the episode asked "What background colour do you want?" (the designer's
reply names it), else another colour. The trajectories are scored by the frontend task itself, on
pages rendered by its Chromium, so their scores are the scorer's (the reference page scores 1.0; a
wrong colour changes every block of the page, far more than the 0.1 gap the pair rule needs).

Trajectories carry real chat-template token ids (tests/synthetic_dialogues.py `dialogue`), so the
critic and actor code paths are the production ones.
"""

from __future__ import annotations

import random

from components.data.records import Trajectory
from components.data.tasks import FrontendTask
from components.tasks.colbench_frontend.task import AGENT_SYSTEM_PROMPT, ColbenchFrontend, extract_html
from tests.synthetic_dialogues import dialogue

COLOURS = ["red", "blue", "green", "yellow", "purple", "gray"]
TITLES = ["Harbor Bakery", "Summit Gear", "Nova Studio", "Quiet Pines", "Atlas Books", "Ember Cafe", "Tidal Labs"]
DECIDING = "What background colour do you want?"
DISTRACTORS = ["What should the title say?", "Do you want a footer?", "Which font do you like?"]
NO_PREFERENCE = "I have no preference there."


def page(colour: str, title: str) -> str:
    return (
        '<html><head><script src="https://cdn.tailwindcss.com"></script></head>'
        f'<body class="bg-{colour}-600 min-h-screen p-16"><h1 class="text-5xl text-white">{title}</h1></body></html>'
    )


def make_tasks(n: int, seed: int) -> list[FrontendTask]:
    rng = random.Random(seed)
    tasks = []
    for i in range(n):
        title = f"{rng.choice(TITLES)} {i}"
        tasks.append(
            FrontendTask(
                problem_description=f"A landing page for {title}: the name in large white text on a coloured page.",
                ground_truth=page(rng.choice(COLOURS), title),
            )
        )
    return tasks


def colour_of(task: FrontendTask) -> str:
    return task.ground_truth.split("bg-")[1].split("-")[0]


def episode(
    tokenizer, task: FrontendTask, index: int, actions: list[str], sample: int, rng: random.Random
) -> Trajectory:
    """The episode of `actions`, then its answer page (the task's colour iff it asked); unscored (0.0)."""
    colour = colour_of(task)
    replies = [f"I want a {colour} background." if a == DECIDING else NO_PREFERENCE for a in actions]
    shown = colour if DECIDING in actions else rng.choice([c for c in COLOURS if c != colour])
    title = task.ground_truth.split('text-white">')[1].split("<")[0]
    answer = "I WANT TO ANSWER: " + page(shown, title)
    opening = [AGENT_SYSTEM_PROMPT.format(max_turns=len(actions) + 1), task.problem_description]
    return dialogue(tokenizer, task.task_id, index, opening, actions, replies, answer, 0.0, sample)


def rollouts(tokenizer, task: ColbenchFrontend, tasks: list[FrontendTask], per_task: int, questions: int, seed: int):
    """`per_task` episodes of each task with uniformly drawn questions, scored by `task` (rendered pages)."""
    rng = random.Random(seed)
    trajs = [
        episode(tokenizer, record, i, [rng.choice([DECIDING, *DISTRACTORS]) for _ in range(questions)], s, rng)
        for i, record in enumerate(tasks)
        for s in range(per_task)
    ]
    results = task.score(tasks, [(t.task_index, t.answer) for t in trajs])
    for traj, result in zip(trajs, results):
        assert extract_html(traj.answer) is not None and result.error is None, result.error
        traj.score, traj.success = result.score, result.success
        traj.passed, traj.total = result.passed, result.total
    return trajs
