"""A scripted OpenAI-compatible LLM server for testing agents against contagent.

``llm_stub`` serves scripted moves (``llm_moves``: chat completions, ``responses_moves``:
the Responses API) in the shapes a real server produces; ``players`` picks each agent's
next move from what it was shown. See docs/testing-agents.md.
"""
