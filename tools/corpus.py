"""Synthetic OpenHands-like rollouts for benchmarks and size-sensitive tests.

Each rollout has a ~15k-character system prompt, ``steps`` tool-calling
exchanges with the full history resent every step (so the raw log grows with
the square of the length, as real agents' logs do), reasoning, and tool outputs
of code-like text. Seeded: the same arguments give the same bytes.
"""

from __future__ import annotations

import random
from pathlib import Path

from contagent.layout import RolloutPaths
from tools.rollouts import RolloutBuilder, assistant, call
from tools.token_rollouts import TokenRolloutBuilder

WORDS = (
    "def return self import from class if else for while try except raise with as "
    "lambda yield async await None True False print len range open path json data "
    "value key result error \"quoted\" 'single' {brace} [list] (paren) \\backslash"
).split()


def _text(rng: random.Random, n_chars: int) -> str:
    out, size = [], 0
    while size < n_chars:
        line = " ".join(rng.choices(WORDS, k=rng.randint(3, 12)))
        out.append(line)
        size += len(line) + 1
    return "\n".join(out)


def make_rollout(
    root: Path, n: int, steps: int, rng: random.Random, tokens: bool = False, scale: int = 1
) -> RolloutPaths:
    """Write rollout ``bench-<n>`` of ``steps`` exchanges (plus a final one) under ``root``;
    with ``tokens``, each outcome carries token data as vLLM reports it; ``scale``
    multiplies the size of each tool output."""
    b: RolloutBuilder
    if tokens:
        # the toy tokenizer gives one id per byte: a 4k-character prompt is ~4k ids
        b = TokenRolloutBuilder(f"bench-{n:05d}", _text(rng, 300), system_prompt=_text(rng, 4_000))
    else:
        b = RolloutBuilder(f"bench-{n:05d}", _text(rng, 600), system_prompt=_text(rng, 15_000))
    for i in range(steps):
        c = call(f"call_{i}", "terminal", command=f"grep -rn 'pattern{i}' src/ | head -50")
        b.step(assistant(_text(rng, 200), c, reasoning=_text(rng, 300)))
        b.tool_output(
            f"call_{i}",
            "terminal",
            _text(rng, rng.randint(500 * scale, 2500 * scale)),
            fragments=2 if i % 10 == 0 else 1,
        )
    b.step(assistant(None, call("call_end", "finish", message="done")))
    return b.write(
        root,
        {"passed": True, "status": "passed", "experiment": "bench", "stop_condition": "finished"},
    )


def generate(
    root: Path, target_bytes: int, steps: int, tokens: bool = False
) -> tuple[int, int, int]:
    """Rollouts under ``root`` until their logs reach ``target_bytes``:
    (total bytes, rollouts, largest log)."""
    rng = random.Random(1234)
    total, n, largest = 0, 0, 0
    while total < target_bytes:
        size = make_rollout(root, n, steps, rng, tokens).exchanges.stat().st_size
        total, n, largest = total + size, n + 1, max(largest, size)
    return total, n, largest
