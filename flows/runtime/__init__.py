"""Running what a plan names: a stage under `dvc repro` in its own process group, the console and step logs,
the supervised worker, the servers, deployments, the project lock, Ray placement and the Prefect tasks."""
