"""The two UIs pointing at each other: a pipeline's MLflow parent run names its Prefect flow run (id and
page), and the Prefect flow run carries an artifact leading to the MLflow run. Wiring only; outside a
Prefect flow run (a bare function call in a test) there is nothing to link.
"""

from __future__ import annotations


def prefect_tags() -> dict[str, str]:
    """MLflow tags naming the current Prefect flow run: `prefect.flow_run_id`, `prefect.flow_run_name`
    and, when the Prefect UI's address is known, `prefect.flow_run_url`."""
    from prefect.runtime import flow_run

    if not flow_run.id:
        return {}
    tags = {"prefect.flow_run_id": str(flow_run.id), "prefect.flow_run_name": str(flow_run.name)}
    return tags | ({"prefect.flow_run_url": str(flow_run.ui_url)} if flow_run.ui_url else {})


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in the MLflow UI when the store is a tracking server (None for a local store)."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return f"{tracking_uri.rstrip('/')}/#/experiments/{experiment_id}/runs/{run_id}"


def link_mlflow_run(tracking_uri: str, experiment_id: str, run_id: str) -> None:
    """An artifact `mlflow-run` on the current Prefect flow run: a link to the MLflow run's page, or
    for a local store its id and how to open it."""
    from prefect.artifacts import create_link_artifact, create_markdown_artifact
    from prefect.runtime import flow_run

    if not flow_run.id:
        return
    url = mlflow_run_url(tracking_uri, experiment_id, run_id)
    about, what = f"MLflow run {run_id} (experiment {experiment_id})", "the run's steps, metrics and dialogues"
    if url:
        create_link_artifact(url, link_text=about, key="mlflow-run", description=what)
    else:
        text = f"{about} in the store `{tracking_uri}`: open it with `sweetflow ui` (MLflow on port 5000)."
        create_markdown_artifact(text, key="mlflow-run", description=what)
