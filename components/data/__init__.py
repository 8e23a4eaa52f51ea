"""Typed records and their reader/writer, ColBench tasks and split, DVC pull, the default model."""
