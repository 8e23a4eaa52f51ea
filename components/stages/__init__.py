"""sweetflow's steps as plain typed functions (no Prefect here); README "Architecture" maps the folders.

A stage started as `python -m components.stages.<stage>` while the run has a stage server hands its
work to a fork of that server here, before anything heavy is imported (components/stages/handover.py)."""

from components.stages.handover import hand_over

hand_over()  # returns at once in any other process, and where the server does not take the stage
