"""The collaborative task interface (components/tasks): a contract every registered task meets, then
the elicitation task's generator, scorer, record validation and rules simulator.

The contract tests run over every task of `registry.TASKS`; each needs a builder in `BUILDERS` that
writes a tiny tasks file under tmp_path (a new task without one fails `test_every_task_has_a_builder`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from pydantic import BaseModel

from components.config.sections import DataConfig
from components.data.records import RecordError, read_jsonl, write_jsonl
from components.data.split import Split
from components.episodes.simulators import SimRequest, make_simulator
from components.tasks import registry
from components.tasks.base import ANSWER_MARKER, Task
from components.tasks.colbench_backend import scoring as backend
from components.tasks.colbench_frontend.config import FrontendConfig
from components.tasks.elicitation import generate as elicitation_generate
from components.tasks.elicitation.config import ElicitationConfig
from components.tasks.elicitation.task import (
    DOMAINS,
    NOT_SURE,
    ElicitationRecord,
    ElicitationTask,
    RulesSimulator,
    grade,
    mentions,
)
from tests.conftest import REPO
from tests.factories import make_task


# --- building each registered task on a tiny tasks file --------------------------------------
def _colbench(tmp_path: Path) -> dict:
    rows = [make_task("add"), make_task("mul", "return a * b"), make_task("sub", "return a - b")]
    write_jsonl(tmp_path / "backend.jsonl", rows)
    return {"data": DataConfig(backend_tasks=tmp_path / "backend.jsonl", eval_fraction=0.5)}


def _elicitation(tmp_path: Path) -> dict:
    cfg = ElicitationConfig(file=tmp_path / "elicitation.jsonl", train_tasks=8, eval_tasks=len(DOMAINS))
    elicitation_generate.run(cfg)
    return {"elicitation": cfg}


def _frontend(tmp_path: Path) -> dict:
    lines = (REPO / "data/colbench/frontend_test.jsonl").open().readlines()[:3]
    (tmp_path / "frontend.jsonl").write_text("".join(lines))
    cfg = FrontendConfig(
        tasks=tmp_path / "frontend.jsonl", eval_fraction=0.5, assets_dir=REPO / "vendor/web", render_cache=None
    )
    return {"frontend": cfg}


BUILDERS: dict[str, Callable[[Path], dict]] = {
    "colbench-backend": _colbench,
    "colbench-frontend": _frontend,
    "elicitation": _elicitation,
}


@dataclass
class Built:
    task: Task
    records: list[BaseModel]
    tmp_path: Path


@pytest.fixture(params=sorted(registry.TASKS))
def built(request, tmp_path, monkeypatch) -> Built:
    name = request.param
    if name not in BUILDERS:
        pytest.fail(f"task {name} has no builder in tests/components/tasks/test_tasks.py BUILDERS")
    monkeypatch.setattr(backend, "DEFAULT_CACHE_DIR", tmp_path / "scoring-cache")  # ColBench's reference cache
    task = registry.make_task(name, BUILDERS[name](tmp_path))
    records, indices = task.load(Split.all)
    assert records and indices == list(range(len(records)))
    return Built(task, records, tmp_path)


def test_every_task_has_a_builder():
    assert sorted(BUILDERS) == sorted(registry.TASKS)


def test_registry_names_its_tasks_and_rejects_unknown_ones():
    for name in registry.TASKS:
        cls = registry.task_class(name)
        assert cls.name == name and cls.__module__ == registry.task_module(name)
    with pytest.raises(ValueError, match="unknown task 'nope'.*colbench-backend"):
        registry.task_class("nope")
    with pytest.raises(ValueError, match="needs the params section"):
        registry.make_task("elicitation", {"data": DataConfig()})


# --- the contract ----------------------------------------------------------------------------
def test_class_declares_its_sections_file_and_simulators(built):
    cls = type(built.task)
    section, key = cls.file_key.split(".")
    assert section in cls.sections and set(built.task.configs) == set(cls.sections)
    assert Path(getattr(built.task.configs[section], key)) == built.task.tasks_file(Split.all)
    assert cls.offline_simulators and "llm" not in cls.offline_simulators
    assert isinstance(cls.record, type) and issubclass(cls.record, BaseModel)


def test_reference_answers_score_one_in_the_order_given(built):
    task, records = built.task, built.records
    answers = [(i, task.reference_answer(r)) for i, r in reversed(list(enumerate(records)))]
    results = task.score(records, answers)
    assert [r.index for r in results] == [i for i, _ in answers]
    assert all(r.score == 1.0 and r.success and r.error is None for r in results), results


def test_empty_and_out_of_range_answers_score_zero(built):
    task, records = built.task, built.records
    results = task.score(
        records, [(0, ""), (len(records) - 1, "   "), (len(records), task.reference_answer(records[0]))]
    )
    assert [r.index for r in results] == [0, len(records) - 1, len(records)]
    assert all(r.score == 0.0 and not r.success for r in results)
    assert "out of range" in results[2].error


def test_records_round_trip(built):
    task, records = built.task, built.records
    write_jsonl(task.tasks_file(Split.all), records)
    again, _ = task.load(Split.all)
    assert again == records
    assert [r.task_id for r in again] == [r.task_id for r in records]
    assert len({r.task_id for r in records}) == len(records)


def test_splits_partition_the_records(built):
    task = built.task
    _, train = task.load(Split.train)
    _, evaluation = task.load(Split.eval)
    assert not set(train) & set(evaluation)
    assert sorted(train + evaluation) == list(range(len(built.records)))
    assert train == sorted(train) and evaluation == sorted(evaluation)


def test_groups_are_names_or_none(built):
    assert all(built.task.group(r) is None or isinstance(built.task.group(r), str) for r in built.records)


def _questions(task: Task, record: BaseModel) -> list[str]:
    """A vague question, a question naming everything the human knows, and one per answer word."""
    answer_words = re.findall(r"[A-Za-z]+", task.reference_answer(record))[:5]
    return [
        "Can you tell me more?",
        f"Is it this: {task.training_info(record)}?",
        *(f"What about {w}?" for w in answer_words),
    ]


def test_offline_simulators_are_deterministic_and_cut(built):
    task = built.task
    requests = [
        SimRequest(r, [("Hello?", "Hi."), (q, None)], seed=s)
        for s, r in enumerate(built.records)
        for q in _questions(task, r)
    ]
    for kind in task.offline_simulators:
        first = task.offline_simulator(kind, 400).reply(requests)
        assert len(first) == len(requests) and all(isinstance(x, str) and x for x in first)
        assert first == task.offline_simulator(kind, 400).reply(requests)
        assert first == task.offline_simulator(kind, 400).reply(list(reversed(requests)))[::-1]
        assert first[:1] == task.offline_simulator(kind, 400).reply(requests[:1])  # batch company does not matter
        short = task.offline_simulator(kind, 20).reply(requests)
        assert all(len(x) <= 20 for x in short) and short == [x[:20] for x in first]
        assert task.offline_simulator(kind, 400).name == kind
    with pytest.raises(ValueError, match="no offline simulator"):
        task.offline_simulator("no-such-simulator", 400)
    default = make_simulator(None, task, None, 16, 400)
    assert default.name == task.offline_simulators[0]


@pytest.mark.parametrize("max_turns", [7, 13])
def test_agent_messages_render_without_training_info(built, max_turns):
    task = built.task
    for record in built.records:
        msgs = task.agent_messages(record, max_turns)
        assert [m["role"] for m in msgs] == ["system", "user"]
        assert all(m["content"].strip() for m in msgs)
        assert str(max_turns) in msgs[0]["content"] and ANSWER_MARKER in msgs[0]["content"]
        info = task.training_info(record)
        assert info.strip() and all(info not in m["content"] for m in msgs)


def test_simulator_messages_hold_the_hidden_information_and_swap_roles(built):
    task = built.task
    dialogue = [("First question?", "First reply."), ("Second question?", None)]
    for record in built.records:
        msgs = task.simulator_messages(record, dialogue)
        assert msgs[0]["role"] == "system"
        system = msgs[0]["content"]
        # the human knows everything the reference answer needs
        assert set(re.findall(r"\w+", task.reference_answer(record))) <= set(re.findall(r"\w+", system))
        assert task.agent_messages(record, 10)[1]["content"] in system  # and what it asked for
        assert [(m["role"], m["content"]) for m in msgs[1:]] == [
            ("user", "First question?"),
            ("assistant", "First reply."),
            ("user", "Second question?"),
        ]


def test_simulator_messages_carry_each_tasks_training_info(built):
    task = built.task
    for record in built.records:
        system = task.simulator_messages(record, [("q?", None)])[0]["content"]
        if isinstance(task, ElicitationTask):
            assert record.preferences() in system and all(d in system for d in record.details)
        else:
            assert task.training_info(record) in system


def test_parse_action_and_final_answer_strip_the_marker(built):
    task = built.task
    reference = task.reference_answer(built.records[0])
    action = task.parse_action(f"Here you go. {ANSWER_MARKER}\n{reference}\n")
    assert action.is_answer and action.content == reference.strip()
    assert task.final_answer(["a question?", f"{ANSWER_MARKER} {reference}"]) == reference.strip()
    question = task.parse_action("  Could you say more?  ")
    assert not question.is_answer and question.content == "Could you say more?"
    assert task.final_answer(["  no marker here "]) == "no marker here"


# --- the elicitation generator ---------------------------------------------------------------
def _generate(tmp_path: Path, name: str = "tasks.jsonl", **fields) -> tuple[ElicitationConfig, list[ElicitationRecord]]:
    cfg = ElicitationConfig(file=tmp_path / name, **fields)
    counts = elicitation_generate.run(cfg)
    records = list(read_jsonl(cfg.file, ElicitationRecord))
    assert counts["train"] == cfg.train_tasks and counts["eval"] == cfg.eval_tasks
    assert counts["heldout_eval"] == sum(r.domain in cfg.heldout_domains for r in records)
    assert not cfg.file.with_name(cfg.file.name + ".tmp").exists()
    return cfg, records


def test_same_config_gives_a_byte_identical_file(tmp_path):
    first, _ = _generate(tmp_path, "a.jsonl")
    second, _ = _generate(tmp_path, "b.jsonl")
    assert first.file.read_bytes() == second.file.read_bytes()
    elicitation_generate.run(first)  # rewritten in place
    assert first.file.read_bytes() == second.file.read_bytes()


def test_another_seed_gives_another_file(tmp_path):
    first, _ = _generate(tmp_path, "a.jsonl", seed=0)
    second, _ = _generate(tmp_path, "b.jsonl", seed=1)
    assert first.file.read_bytes() != second.file.read_bytes()


def _combo(record: ElicitationRecord) -> tuple[str, tuple[str, ...]]:
    return record.domain, tuple(record.slots.values())


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("heldout", [["haircut"], ["pizza", "trip"]])
def test_eval_is_held_out_from_train(tmp_path, seed, heldout):
    cfg, records = _generate(tmp_path, seed=seed, heldout_domains=heldout)
    train = [r for r in records if r.split == "train"]
    evaluation = [r for r in records if r.split == "eval"]
    assert records == train + evaluation  # train rows first
    assert len(train) == cfg.train_tasks and len(evaluation) == cfg.eval_tasks
    assert not {_combo(r) for r in train} & {_combo(r) for r in evaluation}
    assert not {r.domain for r in train} & set(heldout)
    assert {r.domain for r in train} == set(DOMAINS) - set(heldout)
    assert {r.domain for r in evaluation} == set(DOMAINS)
    assert {r.domain for r in evaluation[: len(DOMAINS)]} == set(DOMAINS)  # the first few cover every domain
    assert len({r.task_id for r in records}) == len(records)
    task = ElicitationTask({"elicitation": cfg})
    assert {task.group(r) for r in train} == {"seen"}
    assert {r.domain for r in evaluation if task.group(r) == "heldout"} == set(heldout)


def test_small_eval_still_covers_every_domain(tmp_path):
    _, records = _generate(tmp_path, train_tasks=3, eval_tasks=len(DOMAINS))
    assert sorted(r.domain for r in records if r.split == "eval") == sorted(DOMAINS)


def test_task_split_follows_the_rows_split(tmp_path):
    cfg, records = _generate(tmp_path, train_tasks=10, eval_tasks=7)
    task = ElicitationTask({"elicitation": cfg})
    loaded, train = task.load(Split.train)
    _, evaluation = task.load(Split.eval)
    assert loaded == records and train == list(range(10)) and evaluation == list(range(10, 17))


# --- elicitation scoring: no gaming ----------------------------------------------------------
def _meeting(**slots: str) -> ElicitationRecord:
    values = {"day": "Tuesday", "time": "morning", "place": "online"} | slots
    return ElicitationRecord(
        domain="meeting",
        request="Can you help me book a meeting?",
        slots=values,
        details=["I have a dog named Rex."],
        split="eval",
    )


def _score(record: ElicitationRecord, answer: str):
    return ElicitationTask({}).score([record], [(0, answer)])[0]


def test_listing_every_value_scores_zero(tmp_path):
    _, records = _generate(tmp_path)
    everything = " ".join(v for d in DOMAINS.values() for s in d.slots for v in s.values)
    results = ElicitationTask({}).score(records, [(i, everything) for i in range(len(records))])
    assert all(r.score == 0.0 and not r.success and r.passed == 0 for r in results)
    for i, record in enumerate(records):  # every value of the record's own domain only
        own = ", ".join(v for s in DOMAINS[record.domain].slots for v in s.values)
        assert _score(record, own).score == 0.0, (i, record)


def test_every_combination_of_every_domain_is_gradable_and_answerable():
    """Over all slot-value combinations: the reference scores 1, each slot's own keyword reveals it alone."""
    task = ElicitationTask({})
    for name, domain in DOMAINS.items():
        slot_names = [s.name for s in domain.slots]
        records = [
            ElicitationRecord(domain=name, request=domain.requests[0], slots=dict(zip(slot_names, combo)), split="eval")
            for combo in elicitation_generate.combinations(name)
        ]
        answers = [(i, task.reference_answer(r)) for i, r in enumerate(records)]
        assert all(r.success for r in task.score(records, answers)), name
        for record in records:
            for slot in domain.slots:
                reply = _ask(record, f"What {slot.keywords[0]} would you like?")
                assert reply == f"The {slot.name} is {record.slots[slot.name]}.", (name, slot.name)


def test_a_second_value_of_a_slot_loses_that_slot(tmp_path):
    _, records = _generate(tmp_path, train_tasks=12, eval_tasks=12)
    for record in records:
        reference = ElicitationTask({}).reference_answer(record)
        for slot in DOMAINS[record.domain].slots:
            other = next(v for v in slot.values if v != record.slots[slot.name])
            result = _score(record, f"{reference} or maybe {other}")
            assert grade(record, f"{reference} or maybe {other}")[1] == [slot.name]
            assert result.passed == 2 and result.total == 3 and not result.success
            assert result.score == pytest.approx(2 / 3) and slot.name in result.error


@pytest.mark.parametrize(
    "answer",
    [
        "Tuesday, morning, online",
        "Tuesdays mornings online",
        "tuesday MORNING Online",
        "day: tuesday. time: morning. place: online!",
    ],
)
def test_plural_and_case_variants_count(answer):
    result = _score(_meeting(), answer)
    assert result.success and result.score == 1.0 and result.error is None


def test_es_plural_counts_and_parts_of_words_do_not():
    gift = ElicitationRecord(
        domain="gift", request="x", slots={"item": "scarf", "color": "red", "wrap": "box"}, split="eval"
    )
    assert _score(gift, "scarf, red, boxes").success
    assert _score(gift, "scarves, red, box").score == pytest.approx(2 / 3)  # not a plural s/es
    assert not mentions("afternoon", "noon") and mentions("Noon.", "noon") and not mentions("Tuesdayish", "Tuesday")
    assert _score(_meeting(time="noon"), "Tuesday afternoon online").score == pytest.approx(2 / 3)


def test_missing_and_wrong_slots_are_named():
    result = _score(_meeting(), "Tuesday at the office")
    assert result.passed == 1 and result.error == "wrong or missing: time, place"


# --- record validation -----------------------------------------------------------------------
GOOD = {
    "domain": "meeting",
    "request": "Can you help me book a meeting?",
    "slots": {"day": "Tuesday", "time": "morning", "place": "online"},
    "details": [],
    "split": "train",
}


@pytest.mark.parametrize(
    "bad, field, words",
    [
        (GOOD | {"domain": "karaoke"}, "domain", "unknown domain 'karaoke'"),
        (GOOD | {"slots": {"day": "Sunday", "time": "morning", "place": "online"}}, "slots", "'Sunday'"),
        (GOOD | {"slots": {"day": "Tuesday", "time": "morning"}}, "slots", "exactly day, time, place"),
        ({k: v for k, v in GOOD.items() if k != "request"}, "request", "required"),
        (GOOD | {"split": "test"}, "split", ""),
        (GOOD | {"hint": "Tuesday"}, "hint", ""),
    ],
)
def test_bad_elicitation_rows_name_file_line_and_field(tmp_path, bad, field, words):
    cfg = ElicitationConfig(file=tmp_path / "tasks.jsonl")
    cfg.file.write_text(json.dumps(GOOD) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(RecordError, match=re.escape(f"{cfg.file}:2: field '{field}'")) as info:
        ElicitationTask({"elicitation": cfg}).load(Split.all)
    assert words in str(info.value)


def test_bad_colbench_row_names_file_line_and_field(tmp_path):
    path = tmp_path / "backend.jsonl"
    row = make_task().model_dump()
    path.write_text(json.dumps(row) + "\n\n" + json.dumps({k: v for k, v in row.items() if k != "ground_truth"}) + "\n")
    task = registry.make_task("colbench-backend", {"data": DataConfig(backend_tasks=path)})
    with pytest.raises(RecordError, match=re.escape(f"{path}:3: field 'ground_truth'")):
        task.load(Split.all)


# --- the rules simulator ---------------------------------------------------------------------
def _ask(record: ElicitationRecord, *questions: str, max_chars: int = 400) -> str:
    dialogue = [(q, "earlier reply") for q in questions[:-1]] + [(questions[-1], None)]
    return RulesSimulator(max_chars=max_chars).reply([SimRequest(record, dialogue)])[0]


def test_rules_answers_only_the_slots_asked():
    record = _meeting()
    day = _ask(record, "What day works for you?")
    assert "Tuesday" in day and "online" not in day and "morning" not in day
    place = _ask(record, "Where should we meet?")
    assert "online" in place and "Tuesday" not in place
    both = _ask(record, "Which day and what time?")
    assert "Tuesday" in both and "morning" in both and "online" not in both
    assert _ask(record, "Do you prefer Friday?") == "The day is Tuesday."  # naming a value asks about its slot


def test_rules_vague_question_is_not_sure():
    record = _meeting()
    assert _ask(record, "Can you tell me more?") == NOT_SURE
    assert _ask(record, "What day?", "Anything else?") == NOT_SURE  # only the last question counts


def test_rules_tells_details_only_when_their_topic_is_named():
    record = _meeting()
    assert _ask(record, "Do you have a pet?") == "I have a dog named Rex."
    assert "Rex" not in _ask(record, "What day?")
    assert _ask(record, "What day?", max_chars=10) == "The day is"


# --- elicitation: the exact value of a turn --------------------------------------------------
def _value(history, action: str, last: bool = False) -> float:
    return ElicitationTask({}).turn_value(_meeting(), history, action, last)


def test_turn_value_of_a_question_counts_the_slots_revealed_once_the_human_replies():
    assert _value([], "Hello, how are you?") == 0.0  # "I'm not sure what you mean."
    assert _value([], "What day would you like?") == pytest.approx(1 / 3)  # "The day is Tuesday."
    assert _value([], "Which day and time suit you?") == pytest.approx(2 / 3)
    told = [("What day would you like?", "The day is Tuesday.")]
    assert _value(told, "Where should we meet?") == pytest.approx(2 / 3)  # day already known, place now
    assert _value(told, "Is Tuesday good?") == pytest.approx(1 / 3)  # nothing new: still the day only
    assert _value([("Hi", "I'm not sure what you mean.")], "Hi again") == 0.0


def test_turn_value_of_an_answer_or_a_last_message_is_its_slot_score():
    told = [("What day, time and place?", "The day is Tuesday and the time is morning and the place is online.")]
    assert _value(told, "I WANT TO ANSWER: Tuesday, morning, online") == 1.0
    assert _value(told, "I WANT TO ANSWER: Tuesday, evening") == pytest.approx(1 / 3)
    assert _value(told, "Tuesday morning online", last=True) == 1.0  # the last message is the answer
    assert _value([], "Where should we meet?", last=True) == 0.0  # a question as the answer scores nothing


def test_tasks_without_an_exact_value_say_so(built):
    if built.task.name == "elicitation":
        pytest.skip("elicitation has one")
    record = built.records[0]
    assert built.task.turn_value(record, [], "a question?", False) is None
