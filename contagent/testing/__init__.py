"""Test helpers that ship with the package: the scripted LLM stand-in (``llm_stub``)."""
