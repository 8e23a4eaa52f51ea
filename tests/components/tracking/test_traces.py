"""Episodes logged as MLflow traces (components/tracking/traces.py), into a real sqlite store."""

from __future__ import annotations

from components.data.records import Trajectory, Turn
from components.tracking.traces import log_episodes, turn_spans


def _episode(task: str, seed: int, score: float) -> Trajectory:
    messages = [
        {"role": "system", "content": "You help."},
        {"role": "user", "content": "Book a table."},
        {"role": "assistant", "content": "Which day?"},
        {"role": "user", "content": "The day is Friday."},
        {"role": "assistant", "content": "Friday it is."},
    ]
    first = Turn(index=0, action="Which day?", observation="The day is Friday.")
    turns = [first, Turn(index=1, action="Friday it is.")]
    return Trajectory(
        task_id=task, task_index=3, run_seed=seed, seed=seed, messages=messages, turns=turns,
        answer="Friday it is.", answered=False, score=score, success=score == 1.0,
    )  # fmt: skip


def test_each_turn_pairs_the_agents_message_with_the_humans_reply():
    turns = turn_spans(_episode("t", 0, 0.5).messages[1:])
    assert turns == [
        {"human_before": "Book a table.", "agent": "Which day?", "human_reply": "The day is Friday."},
        {"human_before": "The day is Friday.", "agent": "Friday it is.", "human_reply": ""},
    ]


def test_episodes_become_traces_of_the_run_with_turn_spans_feedback_tags_and_a_session(mlflow_store):
    import mlflow

    _, exp = mlflow_store
    episodes = [_episode("task-a", 0, 1.0), _episode("task-a", 1, 0.0), _episode("task-b", 0, 0.5)]
    step_tags = {"sweetflow.algo": "sweet", "sweetflow.iteration": "1", "git_commit": "abc"}
    with mlflow.start_run(experiment_id=exp) as run:
        ids = log_episodes(episodes, run.info.run_id, exp, step_tags)
    assert len(mlflow.search_traces(locations=[exp], run_id=run.info.run_id, return_type="list")) == 3
    trace = mlflow.get_trace(ids[0])
    assert [s.name for s in trace.data.spans] == ["task 3", "turn 0", "turn 1"]
    assert trace.data.spans[1].outputs == {"agent": "Which day?", "human_reply": "The day is Friday."}
    assert {a.name: a.value for a in trace.info.assessments} == {"score": 1.0, "success": True}
    tags = trace.info.tags
    assert tags["sweetflow.algo"] == "sweet" and tags["sweetflow.task_id"] == "task-a" and tags["sweetflow.seed"] == "0"
    assert "git_commit" not in tags  # only the sweetflow tags travel to the traces
    sessions = {mlflow.get_trace(i).info.request_metadata["mlflow.trace.session"] for i in ids}
    assert sessions == {f"{run.info.run_id}-task-a", f"{run.info.run_id}-task-b"}  # a task's seeds: one session
    query = "tags.`sweetflow.task_id` = 'task-b'"
    found = mlflow.search_traces(locations=[exp], filter_string=query, return_type="list")
    assert [t.info.trace_id for t in found] == [ids[2]]


def test_the_experiment_opens_on_its_runs_unless_it_says_otherwise(mlflow_store):
    import mlflow

    from components.tracking.store import EXPERIMENT_KIND, experiment_id

    root, exp = mlflow_store
    assert mlflow.get_experiment(exp).tags[EXPERIMENT_KIND[0]] == "custom_model_development"
    old = mlflow.create_experiment("made elsewhere")  # an existing experiment without the tag gets it
    assert experiment_id("made elsewhere", root) == old
    assert mlflow.get_experiment(old).tags[EXPERIMENT_KIND[0]] == "custom_model_development"
    mlflow.MlflowClient().set_experiment_tag(old, EXPERIMENT_KIND[0], "genai_development")  # a user's choice stays
    experiment_id("made elsewhere", root)
    assert mlflow.get_experiment(old).tags[EXPERIMENT_KIND[0]] == "genai_development"
