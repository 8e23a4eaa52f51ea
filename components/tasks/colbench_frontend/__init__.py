"""ColBench frontend design: its task class, simulated human, page renderer, visual scorer and config section."""
