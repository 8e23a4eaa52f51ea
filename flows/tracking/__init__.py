"""What lands in MLflow: the one tracker of every stage, CORY's per-iteration runs, and the links between
an MLflow run and its Prefect flow run."""
