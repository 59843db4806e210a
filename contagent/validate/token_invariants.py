"""Invariants of a rollout's token samples against its raw token data (pure, no IO).

These check the written records without the rule that cut them: each record ends
with exactly one kept step's prompt and sampled ids; walking back from that step
along the steps it extends while their tokens stay a prefix of the record gives the
steps it holds; ``constrained`` is true only on sampled tokens; ``mask`` is true exactly
on the sampled tokens of the record's branch that are not constrained (constrained ones
too under ``--train-constrained``), the raw logprobs are on those sampled tokens and 0
elsewhere, ``advantages`` is the rollout's advantage where ``mask`` is true and 0
elsewhere, no temperature is NaN; and every kept step is held as its own in exactly one
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
        problems += [(rid, f"{where}: {p}") for p in _columns(rec, ids, held, own, data)]
    for index in steps:
        if trained[index] != 1:
            problems.append((rid, f"step {index} is trained in {trained[index]} token records"))
    return problems


def _columns(
    rec: dict[str, Any],
    ids: list[int],
    held: list[StepTokens],
    own: list[StepTokens],
    data: RolloutData,
) -> list[str]:
    n = len(ids)
    sampled, mine = [False] * n, [False] * n
    logprobs = array("f", bytes(4 * n))
    for step in held:
        a, b = len(step.prompt), len(step.prompt) + len(step.sampled)
        sampled[a:b] = [True] * (b - a)
        if step in own:
            mine[a:b] = [True] * (b - a)
            logprobs[a:b] = array("f", step.logprobs)
    marks = rec.get("constrained")
    if not isinstance(marks, list) or len(marks) != n:
        return ["constrained is not one flag per token"]
    if any(c and not s for c, s in zip(marks, sampled, strict=True)):
        return ["constrained marks tokens that were not sampled"]
    train = data.token_options.train_constrained
    mask = [m and (train or not c) for m, c in zip(mine, marks, strict=True)]
    problems = []
    if rec.get("mask") != mask:
        problems.append("mask is not exactly its steps' sampled tokens less the constrained")
    if rec.get("logprobs") != logprobs.tolist():
        problems.append("logprobs are not the sampler's")
    advantage = data.group.advantage if data.group is not None else None
    want = [array("f", [advantage])[0] if m else 0.0 for m in mask] if advantage is not None else []
    if advantage is None or rec.get("advantages") != want:
        problems.append("advantages are not the rollout's advantage on the masked tokens")
    temperatures = rec.get("temperatures")
    if not isinstance(temperatures, list) or any(t != t for t in temperatures):
        problems.append("a temperature is NaN")
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
