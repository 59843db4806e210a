"""Compare recorded sampler logprobs with a transformers recompute of the same weights.

Shared by the vLLM tier's tests (the capture checks and the token export's): the
recompute runs in the vLLM tier's venv (``CONTAGENT_VLLM_PYTHON``), this module in the
project's.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: a token whose recorded logprob is further than this from the recompute's was shaped by the
#: server (a grammar or a processor): bf16 serving against an fp32 recompute differs by at
#: most 0.25 on a free token (measured); a token a grammar or a processor shaped, by 0.6 to 18
GAP = 0.5


def recompute(
    model_dir: Path | str,
    sequences: list[tuple[list[int], list[int]]],
    temperatures: list[float] | None = None,
) -> list[list[float]]:
    """Per ``(token_ids, positions)``: the model's logprob of each position's token given
    the tokens before it (at the sequence's temperature, 1 when none is given)."""
    python = os.environ.get("CONTAGENT_VLLM_PYTHON", "python3")
    temps = temperatures or [1.0] * len(sequences)
    payload = [
        {"token_ids": ids, "positions": pos, "temperature": t}
        for (ids, pos), t in zip(sequences, temps, strict=True)
    ]
    proc = subprocess.run(
        [python, str(HERE / "recompute.py"), str(model_dir)],
        input=json.dumps(payload), capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"},
    )  # fmt: skip
    if proc.returncode != 0:
        raise RuntimeError(f"recompute failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def gaps(
    model_dir: Path | str, steps: list[tuple[list[int], list[int], list[float]]]
) -> tuple[float, float]:
    """``(mean |recorded - recomputed|, the same with the recompute read one position
    off)`` over ``(prompt ids, sampled ids, recorded logprobs)`` steps."""
    seqs: list[tuple[list[int], list[int]]] = []
    for prompt, sampled, _ in steps:
        full = prompt + sampled
        seqs.append((full, list(range(len(prompt), len(full)))))
    got = recompute(model_dir, seqs)
    same: list[float] = []
    off: list[float] = []
    for (_, _, recorded), values in zip(steps, got, strict=True):
        same += [abs(a - b) for a, b in zip(recorded, values, strict=True)]
        off += [abs(a - b) for a, b in zip(recorded[1:], values[:-1], strict=False)]
    return sum(same) / len(same), sum(off) / max(1, len(off))
