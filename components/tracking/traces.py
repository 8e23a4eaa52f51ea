"""Episodes as MLflow traces: the dialogues of an evaluation or rollouts step, readable in MLflow's
Traces and Sessions views and linked to the step's run.

One trace per episode: a root span `task <index>` whose inputs are the conversation as chat messages
(the agent's view, without its system prompt) and whose outputs are the answer and the score; under
it one span per agent turn with the agent's message and the human's reply. The score (and whether
the episode succeeded) is feedback on the trace from the task's scorer. The episodes of one task in
one step share a session (`mlflow.trace.session`: `<step's run id>-<task id>`), so the several seeds
or samples of a task read as one conversation group; the trace tags carry the task id, the run seed
and sample, and the step's own tags (algorithm, iteration, task family, stage), so that one task's
dialogue can be found for zero-shot and for each trained model (`tags.sweetflow.task_id = '...'`).

Reads nothing from disk: the caller passes the trajectories; writes through the configured MLflow
store (mlflow.start_span_no_context under the active run, which MLflow records as the source run).
"""

from __future__ import annotations

from typing import Mapping, Sequence

from components.data.records import Trajectory

SCORER = "task scorer"


def conversation(traj: Trajectory) -> list[dict[str, str]]:
    """The episode's chat messages as the agent saw them, without the system prompt."""
    return [{"role": m["role"], "content": m["content"]} for m in traj.messages if m["role"] != "system"]


def turn_spans(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """One entry per agent message: the human message it answered, its text and the human's reply
    (empty after the last turn)."""
    turns = []
    for i, msg in enumerate(messages):
        if msg["role"] != "assistant":
            continue
        before = messages[i - 1]["content"] if i and messages[i - 1]["role"] == "user" else ""
        after = messages[i + 1]["content"] if i + 1 < len(messages) and messages[i + 1]["role"] == "user" else ""
        turns.append({"human_before": before, "agent": msg["content"], "human_reply": after})
    return turns


def trace_tags(traj: Trajectory, step_tags: Mapping[str, str]) -> dict[str, str]:
    """The step's sweetflow tags and the episode's identity."""
    own = {k: str(v) for k, v in step_tags.items() if k.startswith("sweetflow.")}
    return own | {
        "sweetflow.task_id": traj.task_id,
        "sweetflow.task_index": str(traj.task_index),
        "sweetflow.seed": str(traj.run_seed),
        "sweetflow.sample": str(traj.sample),
    }


def log_episode(traj: Trajectory, run_id: str, experiment_id: str, step_tags: Mapping[str, str]) -> str:
    """One episode as a trace under the active run (its feedback apart: `log_feedback`); the trace id."""
    import mlflow
    from mlflow.entities import SpanType

    messages = conversation(traj)
    session = f"{run_id}-{traj.task_id}"  # no '/': the UI puts it in a page's path (a 404 with one)
    root = mlflow.start_span_no_context(
        f"task {traj.task_index}",
        span_type=SpanType.AGENT,
        inputs={"messages": messages},
        tags=trace_tags(traj, step_tags),
        metadata={"mlflow.trace.session": session},
        experiment_id=experiment_id,
    )
    for t, turn in enumerate(turn_spans(messages)):
        span = mlflow.start_span_no_context(
            f"turn {t}", span_type=SpanType.CHAT_MODEL, parent_span=root, inputs={"human": turn["human_before"]}
        )
        span.end(outputs={"agent": turn["agent"], "human_reply": turn["human_reply"]})
    root.end(outputs={"answer": traj.answer, "answered": traj.answered, "score": traj.score})
    return root.trace_id


def log_feedback(trace_id: str, traj: Trajectory) -> None:
    """The episode's score and success as the task scorer's feedback on its (exported) trace."""
    import mlflow
    from mlflow.entities import AssessmentSource

    source = AssessmentSource(source_type="CODE", source_id=SCORER)
    if traj.score is not None:
        mlflow.log_feedback(trace_id=trace_id, name="score", value=float(traj.score), source=source)
    if traj.success is not None:
        mlflow.log_feedback(trace_id=trace_id, name="success", value=bool(traj.success), source=source)


def log_episodes(
    trajs: Sequence[Trajectory], run_id: str, experiment_id: str, step_tags: Mapping[str, str]
) -> list[str]:
    """Each episode as a trace (see the module docstring); the trace ids in order."""
    import mlflow

    ids = [log_episode(t, run_id, experiment_id, step_tags) for t in trajs]
    mlflow.flush_trace_async_logging()  # the store must hold a trace before feedback can be logged on it
    for trace_id, traj in zip(ids, trajs):
        log_feedback(trace_id, traj)
    return ids
