"""Test and benchmark helpers that ship with the package: synthetic rollouts, a scripted LLM (``llm_stub``, its moves in ``llm_moves``)."""
