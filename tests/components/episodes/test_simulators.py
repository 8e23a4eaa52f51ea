import pytest

from components.config.sections import DataConfig
from components.engines.base import Generation
from components.episodes.simulators import DONT_KNOW, LLMSimulator, SimRequest, SimulatorKind, make_simulator
from components.tasks.colbench_backend.simulator import RetrievalSimulator, words
from components.tasks.colbench_backend.task import ColbenchBackend
from components.tasks.elicitation.task import ElicitationTask, RulesSimulator
from tests.factories import make_meeting, make_task

BACKEND = ColbenchBackend({"data": DataConfig()})


def test_words_split_identifiers_and_drop_stopwords():
    assert words("What is the maxValue of input_signal?") == ["max", "value", "input", "signal"]


def test_retrieval_answers_from_the_most_relevant_lines_in_order():
    task = make_task("scale", "return a * b * 3")
    reply = RetrievalSimulator().reply([SimRequest(task, [("How should I combine the numbers?", None)])])[0]
    assert reply.startswith("Here is what I know:")
    assert "combine the two numbers" in reply


def test_retrieval_says_it_does_not_know_when_nothing_matches():
    task = make_task()
    assert RetrievalSimulator().reply([SimRequest(task, [("Any thoughts on the weather?", None)])]) == [DONT_KNOW]


def test_retrieval_is_deterministic_and_cut():
    task = make_task("f", "return " + " + ".join(["a"] * 300))
    sim = RetrievalSimulator(max_chars=400)
    req = [SimRequest(task, [("what does f return for a?", None)])]
    first = sim.reply(req)
    assert first == sim.reply(req) and len(first[0]) <= 400


class EchoEngine:
    name, tokenizer = "echo", None

    def __init__(self, text):
        self.text, self.calls = text, []

    def chat(self, conversations, sampling, seeds):
        self.calls.append((conversations, sampling))
        return [Generation(text=self.text) for _ in conversations]


def test_llm_simulator_batches_greedy_and_cuts_to_400():
    engine = EchoEngine("y" * 1000)
    sim = LLMSimulator(engine=engine, task=BACKEND, max_tokens=64, max_chars=400)
    replies = sim.reply([SimRequest(make_task(), [("q1", None)]), SimRequest(make_task("g"), [("q2", None)])])
    assert replies == ["y" * 400] * 2
    assert len(engine.calls) == 1 and engine.calls[0][1].temperature == 0.0
    conv = engine.calls[0][0][0]
    assert (
        conv[0]["role"] == "system" and "a + b" in conv[0]["content"] and conv[-1] == {"role": "user", "content": "q1"}
    )


def test_llm_simulator_is_prompted_by_its_task():
    record = make_meeting()
    task = ElicitationTask({})
    engine = EchoEngine("  ")
    sim = LLMSimulator(engine=engine, task=task, max_tokens=64, max_chars=400)
    assert sim.reply([SimRequest(record, [("What day?", None)])]) == [DONT_KNOW]  # an empty reply
    assert engine.calls[0][0][0] == task.simulator_messages(record, [("What day?", None)])
    assert sim.reply([]) == [] and len(engine.calls) == 1


def test_llm_simulator_needs_an_engine():
    with pytest.raises(ValueError, match="needs an engine"):
        make_simulator(SimulatorKind.llm, BACKEND, None, 64, 400)


def test_make_simulator_defaults_to_the_tasks_offline_simulator():
    sim = make_simulator(None, BACKEND, None, 64, 123)
    assert isinstance(sim, RetrievalSimulator) and sim.max_chars == 123
    assert isinstance(make_simulator(SimulatorKind.retrieval, BACKEND, None, 64, 400), RetrievalSimulator)
    rules = make_simulator(None, ElicitationTask({}), None, 64, 50)
    assert isinstance(rules, RulesSimulator) and rules.max_chars == 50 and rules.name == "rules"
    llm = make_simulator(SimulatorKind.llm, BACKEND, EchoEngine("x"), 32, 400)
    assert isinstance(llm, LLMSimulator) and llm.task is BACKEND and llm.max_tokens == 32


def test_make_simulator_rejects_another_tasks_offline_simulator():
    with pytest.raises(ValueError, match="has no simulator 'retrieval'.*llm, rules"):
        make_simulator(SimulatorKind.retrieval, ElicitationTask({}), None, 64, 400)
    with pytest.raises(ValueError, match="has no simulator 'rules'.*llm, retrieval"):
        make_simulator(SimulatorKind.rules, BACKEND, None, 64, 400)
