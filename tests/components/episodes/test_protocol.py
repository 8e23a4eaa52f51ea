"""The ColBench backend episode protocol: answer parsing (components/tasks/base.py), the reply cut
(components/episodes/simulators.py) and the task's prompts (components/tasks/colbench_backend/task.py)."""

from components.config.sections import DataConfig, SimulatorPrompt
from components.data.tasks import BackendTask
from components.episodes.simulators import cut_reply
from components.tasks.base import ANSWER_MARKER, parse_marked
from components.tasks.colbench_backend.task import ColbenchBackend, chat_for_simulator

TASK = ColbenchBackend({"data": DataConfig()})
parse_action = TASK.parse_action
final_answer = TASK.final_answer


def _record(problem: str, hidden: str = "def f():\n    return 1") -> BackendTask:
    return BackendTask(
        problem_description=problem, ground_truth=hidden, hidden_information=hidden, test_cases={"t1": "f()"}
    )


def test_answer_marker_at_start_is_an_answer():
    action = parse_action(f"{ANSWER_MARKER}\ndef f(x):\n    return x")
    assert action.is_answer and action.content == "def f(x):\n    return x"


def test_marker_after_preamble_still_answers_and_drops_the_preamble():
    action = parse_action(f"Sure, here it is. {ANSWER_MARKER} def f(): pass")
    assert action.is_answer and action.content == "def f(): pass"


def test_message_without_marker_is_a_question():
    action = parse_action("  What should happen for negative inputs?  ")
    assert not action.is_answer and action.content == "What should happen for negative inputs?"


def test_marker_is_case_sensitive_as_in_the_protocol():
    assert not parse_action("i want to answer: def f(): pass").is_answer


def test_first_marker_wins_and_the_task_parser_is_the_shared_one():
    message = f"x {ANSWER_MARKER} def f(): return '{ANSWER_MARKER}'"
    assert parse_action(message) == parse_marked(message)
    assert parse_action(message).content == f"def f(): return '{ANSWER_MARKER}'"
    assert parse_marked("ANSWER: 3", marker="ANSWER:").content == "3"


def test_final_answer_falls_back_to_last_message():
    assert final_answer(["def f(): return 1"]) == "def f(): return 1"
    assert final_answer(["ask", f"{ANSWER_MARKER} def f(): return 2"]) == "def f(): return 2"


def test_reply_cut_to_limit():
    assert cut_reply("  " + "x" * 1000, 400) == "x" * 400
    assert cut_reply(" short ", 400) == "short"


def test_agent_sees_only_the_description():
    msgs = TASK.agent_messages(_record("Make f. The signature of the function is: def f()", "SECRET = 42"), 10)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "10" in msgs[0]["content"] and ANSWER_MARKER in msgs[0]["content"]
    assert msgs[1]["content"].startswith("Make f.")
    assert all("SECRET" not in m["content"] for m in msgs)


def test_simulator_sees_hidden_information_and_roles_are_swapped():
    dialogue = [("What is x?", "x is 1."), ("And y?", None)]
    msgs = TASK.simulator_messages(_record("Make f.", "SECRET = 42"), dialogue)
    assert "SECRET = 42" in msgs[0]["content"] and "Make f." in msgs[0]["content"]
    assert [(m["role"], m["content"]) for m in msgs[1:]] == [
        ("user", "What is x?"),
        ("assistant", "x is 1."),
        ("user", "And y?"),
    ]
    assert chat_for_simulator(msgs[0]["content"], dialogue) == msgs


def test_the_official_simulator_may_quote_the_hidden_code_and_no_code_is_an_option():
    record = _record("Make f.", "def f():\n    return 42")
    assert DataConfig().simulator_prompt == SimulatorPrompt.official
    official = TASK.simulator_messages(record, [("How?", None)])[0]["content"]
    no_code = ColbenchBackend({"data": DataConfig(simulator_prompt="no_code")})
    ours = no_code.simulator_messages(record, [("How?", None)])[0]["content"]
    for text in (official, ours):
        assert "return 42" in text and "only the hidden information" in text and "do not know" in text
    assert "code" not in official.replace("Python function", "")  # no ban on showing the code
    assert "Do not write code." in ours and "never show it as code" in ours
