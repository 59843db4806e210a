"""docs/testing-agents.md's example of the scripted LLM server runs as written."""

from __future__ import annotations

import re

from tests.helpers import REPO


def test_the_documented_example_runs() -> None:
    text = (REPO / "docs" / "testing-agents.md").read_text()
    [code] = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    exec(compile(code, "docs/testing-agents.md", "exec"), {})
