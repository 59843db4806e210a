"""How a run stops: signals, failing fast when the LLM server goes away, and what a run left
behind in Docker."""
