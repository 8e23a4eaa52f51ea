"""The training loop, checkpoints and model loading shared by every training stage."""
