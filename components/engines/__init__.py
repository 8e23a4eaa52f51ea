"""Text generation engines (vLLM, transformers, OpenAI-compatible HTTP) behind one interface."""
