"""From params.yaml, a profile and -S overrides to a run's plan: flow parameters and options, baselines, the
task a run plays, run folders and the dvc.yaml generated from the stage catalogue."""
