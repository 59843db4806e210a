"""Invariants of a rollout's token samples against its raw token data (pure, no IO).

These check the written records without the rule that cut them: each record ends
with exactly one kept step's prompt and sampled ids; walking back from that step
along the steps it extends while their tokens stay a prefix of the record gives the
steps it holds; ``mask`` is true exactly on those of the record's branch, with the
raw logprobs there and 0 elsewhere; and every kept step is trained in exactly one
record of the rollout.
"""

from __future__ import annotations

from array import array
from collections import Counter
from typing import Any

from contagent.export.formats.rollout_data import RolloutData
from contagent.rules.token_samples import StepTokens

Problem = tuple[str | None, str]


def sample_problems(rid: str, records: list[dict[str, Any]], data: RolloutData) -> list[Problem]:
    """What is wrong with the token records of rollout ``rid`` (none when they are sound)."""
    if data.tokens is None or not records:
        return []
    steps = {s.index: s for s in data.tokens.steps}
    ends: dict[tuple[int, int], list[StepTokens]] = {}
    for s in data.tokens.steps:
        ends.setdefault((s.branch, len(s.prompt) + len(s.sampled)), []).append(s)
    trained: Counter[int] = Counter()
    problems: list[Problem] = []
    for rec in records:
        where = f"tokens branch {rec.get('branch')} sample {rec.get('sample')}"
        ids = rec.get("token_ids") or []
        candidates = ends.get((rec["branch"], len(ids)), [])
        last = next((s for s in candidates if ids == s.prompt + s.sampled), None)
        if last is None:
            problems.append((rid, f"{where}: does not end with a kept step's tokens"))
            continue
        held = _held(last, ids, steps)
        own = [s for s in held if s.branch == last.branch]
        trained.update(s.index for s in own)
        mask = [False] * len(ids)
        logprobs = array("f", bytes(4 * len(ids)))
        for step in own:
            a = len(step.prompt)
            mask[a : a + len(step.sampled)] = [True] * len(step.sampled)
            logprobs[a : a + len(step.sampled)] = array("f", step.logprobs)
        if rec.get("mask") != mask:
            problems.append((rid, f"{where}: mask is not exactly its steps' sampled tokens"))
        elif rec.get("logprobs") != logprobs.tolist():
            problems.append((rid, f"{where}: logprobs are not the sampler's"))
    for index in steps:
        if trained[index] != 1:
            problems.append((rid, f"step {index} is trained in {trained[index]} token records"))
    return problems


def _held(last: StepTokens, ids: list[int], steps: dict[int, StepTokens]) -> list[StepTokens]:
    """``last`` and the steps before it whose tokens the record begins with."""
    held = [last]
    while held[-1].parent is not None:
        parent = steps[held[-1].parent]
        end = len(parent.prompt) + len(parent.sampled)
        if held[-1].prompt[:end] != parent.prompt + parent.sampled:
            break
        held.append(parent)
    return held
