"""ColBench backend programming: its task class, simulated human (retrieval) and scorer (the hidden
unit tests, run in components/scoring's sandbox)."""
