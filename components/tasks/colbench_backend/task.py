"""ColBench backend programming behind the task interface (docs/algorithms.md, "Episode protocol").

Reads: the tasks file of params `data` (data/colbench/backend_test.jsonl, DVC-tracked, split by hash;
or the official hub files). The agent sees only the problem description; each turn it asks a
question or answers with `I WANT TO ANSWER:` followed by the code; at most `max_turns` turns, then
the last message is the answer. The simulated human sees the description, the hidden information
and the dialogue, answers only from the hidden information in at most two sentences, and its reply
is cut to 400 characters. Answers are scored in the sandbox (components/scoring: fork-servers
outside the pipeline's process) by the ten hidden test calls; the critic's training-time
information c is the hidden information (the reference code in this release).

Departures, documented: the official prompt re-renders the whole dialogue as one text each turn;
we keep it as a chat (system, then alternating user/assistant messages) so the turn-t prompt
extends the turn-(t-1) token ids and vLLM's prefix cache is reused. As officially, the marker
is accepted anywhere in the message and the answer is what follows the first marker, except that
the official environment stops the answer at a second marker (we keep the rest). Prompts are our
own wording of the protocol. The llm simulator's instructions are `data.simulator_prompt`:
`official` (default) has the official prompt's content, which only restricts the human to the
hidden information (the reference code, so it may quote formulas or snippets); `no_code` adds
ours from before (describe it in words, never write code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from components.config.sections import SimulatorPrompt
from components.data.records import ScoreResult
from components.data.split import Split, select
from components.data.tasks import BackendTask
from components.tasks.base import ANSWER_MARKER, Dialogue, Task, chat_for_simulator

AGENT_SYSTEM_PROMPT = (
    "You are a programming assistant collaborating with a human who wants a Python function. "
    "Their request may leave out details that only they know. You may ask them one clarifying "
    "question per message, and you have at most {max_turns} messages in total. As soon as you "
    "know enough, reply with '" + ANSWER_MARKER + "' followed by the complete Python function "
    "and nothing else. Keep the function signature the human gave."
)

_SIMULATOR_SETUP = (
    "You are a human who asked a programming assistant to write a Python function for you. "
    "Your request was:\n{problem}\n\n"
)
_SIMULATOR_RULES = (
    "The assistant's messages come to you as user messages. Behave like a person who needs its help. "
    "Answer its questions using only the hidden information above; if that information does not "
    "answer a question, say you do not know. Answer in two sentences and say nothing else."
)
SIMULATOR_PROMPTS = {
    # the official prompt's content (prompts/human_simulator_code_prompt.txt), in our words: it only
    # restricts the human to the hidden information, here the reference code, which it may quote
    SimulatorPrompt.official: _SIMULATOR_SETUP + "Hidden information only you know:\n{hidden}\n\n" + _SIMULATOR_RULES,
    # our earlier instructions: the human describes the hidden information and never writes code
    SimulatorPrompt.no_code: _SIMULATOR_SETUP
    + "Hidden information only you know (never show it as code; describe it in words):\n{hidden}\n\n"
    + _SIMULATOR_RULES
    + " Do not write code.",
}


class ColbenchBackend(Task):
    name = "colbench-backend"
    record = BackendTask
    sections = ("data",)
    file_key = "data.backend_tasks"
    offline_simulators = ("retrieval",)
    score_alias = "tests_passed"

    def tasks_file(self, split: Split) -> Path:
        return self.configs["data"].tasks_file(split)

    def split_indices(self, records: Sequence[BackendTask], split: Split) -> list[int]:
        data = self.configs["data"]
        if data.source == "hub":  # the official files are the splits
            return list(range(len(records)))
        return select(records, split, data.eval_fraction, data.split_salt)

    def agent_messages(self, record: BackendTask, max_turns: int) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": AGENT_SYSTEM_PROMPT.format(max_turns=max_turns)},
            {"role": "user", "content": record.problem_description},
        ]

    def simulator_messages(self, record: BackendTask, dialogue: Dialogue) -> list[dict[str, str]]:
        prompt = SIMULATOR_PROMPTS[self.configs["data"].simulator_prompt]
        system = prompt.format(problem=record.problem_description, hidden=record.hidden_information)
        return chat_for_simulator(system, dialogue)

    def offline_simulator(self, kind: str, max_chars: int):
        from components.tasks.colbench_backend.simulator import RetrievalSimulator

        if kind != "retrieval":
            raise ValueError(f"task {self.name} has no offline simulator '{kind}' (it has: retrieval)")
        return RetrievalSimulator(max_chars=max_chars)

    def score(self, records: Sequence[BackendTask], answers: Sequence[tuple[int, str]]) -> list[ScoreResult]:
        """Scored in this machine's sandbox, or in every node's when the run is placed on Ray (the
        `cluster` section of the stage's params file: components/cluster/connect.py)."""
        from components.cluster.connect import join
        from components.config.cluster import cluster_section
        from components.tasks.colbench_backend.scoring import score_answers  # the sandbox: for scoring stages only

        if join(cluster_section()):
            from components.cluster.sandboxes import RaySandboxes

            return score_answers(records, answers, sandboxes=RaySandboxes)
        return score_answers(records, answers)

    def training_info(self, record: BackendTask) -> str:
        return record.hidden_information

    def reference_answer(self, record: BackendTask) -> str:
        return record.ground_truth
