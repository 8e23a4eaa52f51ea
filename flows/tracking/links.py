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


RUNS_VIEW = "workflowType=machine_learning"  # MLflow 3's UI shows an experiment's GenAI pages unless told


def runs_page(base_url: str, experiment_id: str, run_id: str | None = None) -> str:
    """An experiment's runs table (or one run's page) in the MLflow UI at `base_url`. MLflow 3.17 picks
    its view in the browser: the URL's `workflowType`, else the view last chosen there, else GenAI (an
    empty overview for a training experiment), so every link sweetflow prints says which."""
    return f"{base_url.rstrip('/')}/#/experiments/{experiment_id}/runs{f'/{run_id}' if run_id else ''}?{RUNS_VIEW}"


def mlflow_run_url(tracking_uri: str, experiment_id: str, run_id: str) -> str | None:
    """The run's page in the MLflow UI when the store is a tracking server (None for a local store)."""
    if not tracking_uri.startswith(("http://", "https://")):
        return None
    return runs_page(tracking_uri, experiment_id, run_id)


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
