"""The MLflow and Prefect runs of a pipeline point at each other (flows/tracking/links.py)."""

from flows.tracking.links import link_mlflow_run, mlflow_run_url, prefect_tags, runs_page


def test_a_tracking_server_gets_a_link_to_the_runs_page_and_a_local_store_none():
    url = mlflow_run_url("http://127.0.0.1:5000/", "3", "abc")
    assert url == "http://127.0.0.1:5000/#/experiments/3/runs/abc?workflowType=machine_learning"  # not GenAI
    assert runs_page("http://h:1", "3") == "http://h:1/#/experiments/3/runs?workflowType=machine_learning"
    assert mlflow_run_url("sqlite:///mlflow/mlflow.db", "3", "abc") is None


def test_outside_a_prefect_flow_run_there_is_nothing_to_link():
    assert prefect_tags() == {}
    link_mlflow_run("sqlite:///x.db", "1", "abc")  # no flow run: no artifact, no error
