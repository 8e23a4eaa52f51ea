"""What the pipeline reads back from a CORY stage's files (flows/tracking/cory.py)."""

import json

from flows.tracking.cory import eval_metrics, eval_points, render_samples, summary_entries


def _write(out, rows, initial=None):
    out.mkdir(parents=True, exist_ok=True)
    (out / "iterations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if initial:
        (out / "eval_initial.json").write_text(json.dumps(initial))


def _evals(agent, pass_at_1, kl):
    return {
        f"eval/{agent}/pass_at_1": pass_at_1,
        f"eval/{agent}/reward": pass_at_1,
        f"eval/{agent}/kl": kl,
        f"eval/{agent}/objective": pass_at_1 - 0.01 * kl,
        f"eval/{agent}/tokens": 10,
    }


def test_every_agent_gets_the_base_model_as_iteration_0_then_one_point_per_iteration(tmp_path):
    rows = [
        {"iteration": i, "train/agent0/kl": 0.1, **_evals("agent0", 0.25 * i, i), **_evals("agent1", 0.5, 2 * i)}
        for i in (1, 2)
    ]
    _write(tmp_path, rows, initial={"pass_at_1": 0.125, "reward": 0.125, "kl": 0.0, "objective": 0.125})
    points = eval_points(tmp_path, n=8)
    assert [(i, a) for i, a, _ in points] == [
        (0, "agent0"),
        (0, "agent1"),
        (1, "agent0"),
        (1, "agent1"),
        (2, "agent0"),
        (2, "agent1"),
    ]
    assert points[0][2] == {
        "success_rate": 0.125,
        "pass_at_1": 0.125,
        "task_reward": 0.125,
        "kl": 0.0,
        "objective": 0.125,
        "n": 8.0,
    }
    assert points[4][2]["success_rate"] == 0.5 and points[5][2]["kl"] == 4


def test_the_summary_has_one_entry_per_evaluated_iteration_with_every_agents_reward_and_kl(tmp_path):
    rows = [{"iteration": i, **_evals("agent0", 0.25 * i, i), **_evals("agent1", 0.5, 2 * i)} for i in (1, 2)]
    _write(tmp_path, rows, initial={"reward": 0.1, "kl": 0.0, "objective": 0.1, "sampled_kl": 0.0})
    entries = summary_entries(tmp_path)
    assert [e["k"] for e in entries] == [0, 1, 2]
    assert entries[0]["metrics"]["agent1/reward"] == 0.1 and entries[0]["metrics"]["agent0/sampled_kl"] == 0.0
    assert entries[2]["metrics"]["agent0/reward"] == 0.5 and entries[2]["metrics"]["agent1/kl"] == 4


def test_a_run_killed_before_its_first_iteration_has_only_the_base_point(tmp_path):
    _write(tmp_path, [], initial={"pass_at_1": 0.0, "reward": 0.0, "kl": 0.0, "objective": 0.0})
    assert [(i, a) for i, a, _ in eval_points(tmp_path, n=2)] == [(0, "agent0")]


def test_samples_render_prompt_target_and_each_role_answer_with_its_reward(tmp_path):
    sample = {
        "iteration": 3,
        "question": 0,
        "role": "observer",
        "agent": "agent1",
        "prompt": "2+2?",
        "target": "4",
        "answer": "It is 4",
        "reward": 1.0,
        "task_reward": 1.0,
    }
    (tmp_path / "samples.jsonl").write_text(json.dumps(sample) + "\n")
    text = render_samples(tmp_path / "samples.jsonl")
    assert "iteration 3, question 0: observer (agent1), reward 1" in text and "It is 4" in text
    assert "**Prompt.** 2+2?" in text and "**Target.** 4" in text


def test_a_task_without_pass_at_1_logs_no_success_rate(tmp_path):
    values = {"reward": 0.3, "kl": 0.5, "objective": 0.295}
    assert eval_metrics(values, 4) == {"task_reward": 0.3, "kl": 0.5, "objective": 0.295, "n": 4.0}
