"""The batched episode driver on a scripted agent (real tokenizer, real simulators)."""

from components.config.sections import DataConfig
from components.episodes.driver import EpisodeConfig, EpisodeDriver, EpisodeJob
from components.tasks.base import ANSWER_MARKER
from components.tasks.colbench_backend.simulator import RetrievalSimulator
from components.tasks.colbench_backend.task import ColbenchBackend
from components.tasks.elicitation.task import ElicitationTask, RulesSimulator
from tests.factories import make_meeting, make_task

BACKEND = ColbenchBackend({"data": DataConfig()})


def ask_then_answer(prompt: str, seed: int) -> str:
    if "Here is what I know" in prompt or "I don't know" in prompt:
        return f"{ANSWER_MARKER}\ndef add(a, b):\n    return a + b"
    return "How should I combine the two numbers?"


def never_answer(prompt: str, seed: int) -> str:
    return "Could you tell me more about the numbers?"


def run(tokenizer, scripted, script, jobs, **cfg):
    engine = scripted(tokenizer, script)
    driver = EpisodeDriver(engine, RetrievalSimulator(), EpisodeConfig(**cfg), BACKEND)
    return driver, engine, driver.run(jobs, progress=False)


def test_ask_then_answer_records_exact_tokens_and_dialogue(tokenizer, scripted):
    jobs = [EpisodeJob(0, make_task("add"), run_seed=0), EpisodeJob(3, make_task("mul", "return a * b"), 0)]
    driver, engine, trajs = run(tokenizer, scripted, ask_then_answer, jobs)
    assert [t.task_index for t in trajs] == [0, 3]
    for traj in trajs:
        assert traj.answered and traj.answer == "def add(a, b):\n    return a + b"
        assert len(traj.turns) == 2 and traj.turns[0].observation.startswith("Here is what I know")
        first, second = traj.turns
        # turn 2's prompt extends turn 1's prompt + sampled ids exactly (prefix-cache friendly)
        assert second.prompt_ids[: len(first.prompt_ids) + len(first.response_ids)] == (
            first.prompt_ids + first.response_ids
        )
        assert len(first.response_logprobs) == len(first.response_ids)
        assert [m["role"] for m in traj.messages] == ["system", "user", "assistant", "user", "assistant"]
    assert driver.stats.prompt_reencoded == 0 and driver.stats.prompt_reuse == 2


def test_extended_prompt_equals_fresh_rendering(tokenizer, scripted):
    _, _, trajs = run(tokenizer, scripted, ask_then_answer, [EpisodeJob(0, make_task(), 0)])
    traj = trajs[0]
    fresh = tokenizer.apply_chat_template(traj.messages[:4], tokenize=False, add_generation_prompt=True)
    assert tokenizer.decode(traj.turns[1].prompt_ids) == fresh


def test_one_agent_call_and_one_simulator_call_per_turn(tokenizer, scripted):
    jobs = [EpisodeJob(i, make_task(f"f{i}"), 0) for i in range(5)]
    driver, engine, _ = run(tokenizer, scripted, ask_then_answer, jobs)
    assert [len(b) for b in engine.batches] == [5, 5]
    assert driver.stats.agent_calls == 2 and driver.stats.simulator_calls == 1


def test_turn_cap_takes_last_message_as_answer(tokenizer, scripted):
    _, engine, trajs = run(tokenizer, scripted, never_answer, [EpisodeJob(0, make_task(), 0)], max_turns=10)
    traj = trajs[0]
    assert len(traj.turns) == 10 and not traj.answered
    assert traj.answer == "Could you tell me more about the numbers?"
    assert traj.turns[-1].observation is None and len(engine.batches) == 10


def test_episode_seeds_do_not_depend_on_batch_company(tokenizer, scripted):
    job = EpisodeJob(0, make_task(), run_seed=7)
    _, alone, _ = run(tokenizer, scripted, ask_then_answer, [job])
    _, shared, _ = run(tokenizer, scripted, ask_then_answer, [EpisodeJob(1, make_task("g"), 7), job])
    assert [s[0] for s in alone.seeds] == [s[1] for s in shared.seeds]
    assert len(set(shared.seeds[0])) == 2  # different tasks, different seeds
    _, other_seed, _ = run(tokenizer, scripted, ask_then_answer, [EpisodeJob(0, make_task(), run_seed=8)])
    assert other_seed.seeds[0] != alone.seeds[0]


def test_full_context_ends_the_episode(tokenizer, scripted):
    driver, _, trajs = run(
        tokenizer, scripted, never_answer, [EpisodeJob(0, make_task(), 0)], max_tokens=200, max_model_len=400
    )
    assert len(trajs[0].turns) < 10 and driver.stats.context_full == 1


def test_episodes_are_handed_over_as_they_finish(tokenizer, scripted):
    engine = scripted(tokenizer, ask_then_answer)
    seen = []
    EpisodeDriver(engine, RetrievalSimulator(), EpisodeConfig(), BACKEND).run(
        [EpisodeJob(0, make_task(), 0)], on_done=seen.append, progress=False
    )
    assert len(seen) == 1 and seen[0].answered


def test_the_task_renders_the_prompts_and_parses_the_answers(tokenizer, scripted):
    """Another task (elicitation, rules simulator): its prompts, its replies, its answer parsing."""
    record = make_meeting()
    task = ElicitationTask({})

    def elicit(prompt: str, seed: int) -> str:
        if "The day is Tuesday" in prompt:
            return f"Got it. {ANSWER_MARKER} Tuesday, morning, online"
        return "Which day, time and place do you want?"

    engine = scripted(tokenizer, elicit)
    driver = EpisodeDriver(engine, RulesSimulator(), EpisodeConfig(), task)
    traj = driver.run([EpisodeJob(2, record, 0)], progress=False)[0]
    assert traj.messages[:2] == task.agent_messages(record, EpisodeConfig().max_turns)
    assert traj.turns[0].observation == "The day is Tuesday and the time is morning and the place is online."
    assert traj.answered and traj.answer == "Tuesday, morning, online" and traj.task_id == record.task_id
    assert task.score([record], [(0, traj.answer)])[0].success
