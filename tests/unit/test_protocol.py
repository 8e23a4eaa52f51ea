from components.episodes.protocol import (
    ANSWER_MARKER,
    agent_messages,
    cut_reply,
    final_answer,
    parse_action,
    simulator_messages,
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


def test_final_answer_falls_back_to_last_message():
    assert final_answer("def f(): return 1") == "def f(): return 1"
    assert final_answer(f"{ANSWER_MARKER} def f(): return 2") == "def f(): return 2"


def test_reply_cut_to_limit():
    assert cut_reply("  " + "x" * 1000, 400) == "x" * 400
    assert cut_reply(" short ", 400) == "short"


def test_agent_sees_only_the_description():
    msgs = agent_messages("Make f. The signature of the function is: def f()", 10)
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert "10" in msgs[0]["content"] and ANSWER_MARKER in msgs[0]["content"]
    assert msgs[1]["content"].startswith("Make f.")


def test_simulator_sees_hidden_information_and_roles_are_swapped():
    msgs = simulator_messages("Make f.", "SECRET = 42", [("What is x?", "x is 1."), ("And y?", None)])
    assert "SECRET = 42" in msgs[0]["content"] and "Make f." in msgs[0]["content"]
    assert [(m["role"], m["content"]) for m in msgs[1:]] == [
        ("user", "What is x?"),
        ("assistant", "x is 1."),
        ("user", "And y?"),
    ]
