"""A controlled collaborative world where exactly one agent turn decides success.

Each task hides one detail (a topic word and its value) that the request names but does not
give. An episode has `questions` agent turns, each one of four questions drawn at random, then a
fixed answer turn. Only "What <topic> should I use?" with the task's own topic is the deciding
action: an episode succeeds (score 1.0) iff it asks it at least once. The other three questions
(an example, a name, a style) never help, and the human's reply is the same for
every question, so nothing but the deciding question separates a success from a failure.
(A harder variant, where a distractor asks about ANOTHER task's topic so that only the reference
tells them apart, is not learnt by the tiny random-init model in a test's budget: measured mean
advantage 0.38 for the deciding question vs 0.40 for the other-topic one.)

Trajectories carry real chat-template token ids built like the rollout driver builds them
(components/episodes/scripted.py), so the critic and actor code paths are the production ones.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from components.data.records import Trajectory
from components.data.tasks import BackendTask
from components.episodes.scripted import scripted_trajectory as dialogue

TOPICS = ["threshold", "separator", "prefix", "timeout", "currency", "encoding"]
REPLY = "Please decide that yourself."
ANSWER = "I WANT TO ANSWER: def solve(x):\n    return x"
SYSTEM = "You are a helpful agent. Ask questions, then answer."


def deciding(topic: str) -> str:
    return f"What {topic} should I use?"


DISTRACTORS = [
    "Can you give me an example call?",
    "What should the function be named?",
    "Do you prefer tabs or spaces?",
]


def make_task(topic: str, value: int) -> BackendTask:
    code = f"def solve(x):\n    {topic} = {value}\n    return x"
    return BackendTask(
        problem_description=f"Write a function that needs a {topic}. It is {value}? "
        "The signature of the function is: def solve(x)",
        ground_truth=code,
        hidden_information=code,
        test_cases={"test1": "solve(1)"},
    )


@dataclass
class World:
    tasks: list[BackendTask]
    topics: list[str]


def make_world(n_tasks: int, seed: int) -> World:
    rng = random.Random(seed)
    topics = [rng.choice(TOPICS) for _ in range(n_tasks)]
    return World([make_task(t, rng.randint(10, 99)) for t in topics], topics)


def episode(tokenizer, task: BackendTask, index: int, actions: list[str], sample: int) -> Trajectory:
    """A trajectory with the given question actions, then the answer; scored by the world's rule."""
    topic = task.ground_truth.split("\n")[1].split("=")[0].strip()
    success = deciding(topic) in actions
    replies = [REPLY] * len(actions)
    return dialogue(
        tokenizer,
        task.task_id,
        index,
        [SYSTEM, task.problem_description],
        actions,
        replies,
        ANSWER,
        float(success),
        sample,
    )


def rollouts(tokenizer, world: World, per_task: int, questions: int, seed: int) -> list[Trajectory]:
    """`per_task` episodes per task with uniformly drawn questions."""
    rng = random.Random(seed)
    out = []
    for i, (task, topic) in enumerate(zip(world.tasks, world.topics)):
        options = [deciding(topic)] + DISTRACTORS
        for s in range(per_task):
            out.append(episode(tokenizer, task, i, [rng.choice(options) for _ in range(questions)], s))
    return out


def one_decider(tokenizer, world: World, questions: int, seed: int) -> list[tuple[Trajectory, int]]:
    """Per task, one episode that asks the deciding question exactly once; with its turn number."""
    rng = random.Random(seed)
    out = []
    for i, (task, topic) in enumerate(zip(world.tasks, world.topics)):
        actions = rng.sample(DISTRACTORS, questions - 1)
        at = rng.randrange(questions)
        actions.insert(at, deciding(topic))
        out.append((episode(tokenizer, task, i, actions, 0), at))
    return out
