"""sweetflow's steps as plain typed functions (no Prefect here); README "Architecture" maps the folders."""
