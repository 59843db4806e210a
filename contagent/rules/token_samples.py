"""Token samples for RL trainers: which token runs a rollout gives (pure functions, no IO).

A *sample* is a maximal run of consecutive kept steps of one branch in which each
step's prompt token ids begin with exactly the previous step's prompt ids followed
by the ids it sampled. Its ``token_ids`` are the last step's prompt ids plus its
sampled ids: every token is one the server reported, at the position it reported,
so nothing is spliced or re-tokenized. Where the prefix breaks, a new sample starts
with that step's full prompt, and the break is recorded. A forked branch's first
sample starts with the steps it shares with the branch it forks from (as context)
when the prefix holds up to the fork; those shared steps are trained (``mask``
true) only in the earlier branch's sample, as a trainer trains a shared node once.

The exporter writes these samples and the validator rebuilds them with the same
functions, so the two never disagree on a boundary.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, replace
from typing import Any, Literal

from contagent import wire
from contagent.rules.history import Problem
from contagent.rules.policy_versions import step_version, token_versions
from contagent.rules.rl import model_kinds
from contagent.rules.sampling import (
    GREEDY_BELOW,
    StepSampling,
    constrained_ranges,
    constraint,
    sampled_texts,
    step_sampling,
)
from contagent.rules.upstream_view import token_exchange, translated
from contagent.wire.chat import tool_calls, usage_counts

#: Why a rollout's kept steps give no token samples (the row's tokens section names them).
TokenKind = Literal[
    "no_tokens",
    "no_logprobs",
    "token_mismatch",
    "bad_tokens",
    "unknown_sampling",
    "zero_temperature",
]

#: The one-line hint of ``unknown_sampling``.
SAMPLING_HINT = (
    "record with --sampling-defaults temperature=... (or --sampling-override) on "
    "contagent proxy/run so that the temperature is known"
)

_MAX_ID = 2**31 - 1  # the samples store int32 ids
_NAN = float("nan")


@dataclass(frozen=True)
class StepTokens:
    """The token data of one kept step, read from its raw records."""

    index: int
    branch: int
    parent: int | None
    prompt: list[int]
    sampled: list[int]
    logprobs: list[float]
    temperature: float
    """The temperature the step was sampled at."""
    constrained: tuple[tuple[int, int], ...] = ()
    """Ranges ``[a, b)`` of the sampled tokens (0-based within them) a grammar constrained."""
    version: int | None = None
    """The policy version it was sampled under (its request went upstream and it ended
    under it), if recorded."""


@dataclass(frozen=True)
class Sample:
    """One sample: the run of steps whose tokens it holds, context steps first."""

    branch: int
    sample: int
    steps: tuple[StepTokens, ...]

    @property
    def own(self) -> list[StepTokens]:
        """The steps this sample trains (its branch's), not the fork context before them."""
        return [s for s in self.steps if s.branch == self.branch]


@dataclass(frozen=True)
class TokenSamples:
    """A rollout's token samples, or why its kept steps give none."""

    problems: tuple[Problem, ...]
    samples: tuple[Sample, ...]
    counts: tuple[int, ...]
    """Samples per branch (all zero when there are problems)."""
    breaks: tuple[dict[str, int], ...]
    """Each prefix break: ``exchange_index``, ``branch`` and the first differing ``position``."""
    steps: tuple[StepTokens, ...] = ()
    """Every kept step's token data, in row order, when every step's is sound (also when a
    sampling problem leaves the rollout without samples); empty otherwise."""
    sampling: tuple[dict[str, Any], ...] = ()
    """Every kept step's sampling and constraint, in row order (the section's ``sampling``)."""

    def section(self) -> dict[str, Any]:
        """The results row's ``tokens`` section."""
        return {
            "kinds": sorted({kind for kind, _ in self.problems}),
            "reason": "; ".join(text for _, text in self.problems) or None,
            "samples": list(self.counts),
            "breaks": [dict(b) for b in self.breaks],
            "sampling": [dict(s) for s in self.sampling],
        }


def has_token_data(outcomes: dict[int, dict[str, Any]]) -> bool:
    """Did the proxy record token data for any exchange of this raw log?"""
    return any(out.get("tokens") is not None for out in outcomes.values())


def _ids(value: Any) -> bool:
    """A list of int32 token ids (C-speed checks: these lists are long)."""
    if not isinstance(value, list):
        return False
    if not value:
        return True
    return set(map(type, value)) == {int} and min(value) >= 0 and max(value) <= _MAX_ID


def _logprobs(value: list[Any]) -> bool:
    if not value:
        return True
    if not set(map(type, value)) <= {float, int}:
        return False
    return math.isfinite(math.fsum(value))


def _choice(tokens: dict[str, Any]) -> dict[str, Any] | None:
    """The token data of choice 0: the choice a step's response is."""
    choices = tokens.get("choices")
    if not isinstance(choices, list):
        return None
    return next((c for c in choices if isinstance(c, dict) and c.get("index") == 0), None)


def sampling_problem(sampling: StepSampling, where: str) -> Problem | None:
    """A step whose temperature is not known, or is greedy: prime-rl divides by it."""
    temperature = sampling.temperature
    if temperature is None:
        return ("unknown_sampling", f"{where}: its temperature is not known ({SAMPLING_HINT})")
    if temperature < GREEDY_BELOW:
        return ("zero_temperature", f"{where}: sampled at temperature {temperature} (greedy)")
    return None


def step_tokens(
    step: dict[str, Any],
    request: dict[str, Any],
    outcome: dict[str, Any],
    usage: dict[str, int] | None,
    sampling: StepSampling | None = None,
) -> StepTokens | Problem:
    """The token data of a kept step (a row's step, with its raw records), or what is wrong."""
    index = step["exchange_index"]
    where = f"step {index}"
    if translated(request):
        request, outcome = token_exchange(request, outcome)
        usage = usage_counts(outcome.get("usage"))
    api = wire.for_path(request.get("path"))
    if api is None or not api.tokens or request.get("api") not in (None, api.name):
        return ("no_tokens", f"{where}: its route returns no token ids")
    found = _token_data(outcome.get("tokens"), usage, where)
    if not isinstance(found[0], list):
        return found
    prompt, sampled, logprobs = found
    version = step_version(request, outcome, where)
    if isinstance(version, tuple):
        return version
    sampling = sampling or step_sampling(request)
    kind = constraint(request.get("body"), sampling)  # the chat body: what was sampled
    calls = bool(tool_calls(step["response"])) if isinstance(step.get("response"), dict) else True
    texts = sampled_texts(outcome) if kind == "tool_call" else None
    return StepTokens(
        index=index,
        branch=step["branch"],
        parent=step["extends"],
        prompt=prompt,
        sampled=sampled,
        logprobs=logprobs,
        temperature=sampling.temperature if sampling.temperature is not None else _NAN,
        constrained=constrained_ranges(kind, texts, len(sampled), calls),
        version=version,
    )


def _token_data(
    data: Any, usage: dict[str, int] | None, where: str
) -> tuple[list[int], list[int], list[float]] | Problem:
    """(prompt ids, sampled ids, logprobs) of choice 0 from an outcome's ``tokens``, checked."""
    choice = _choice(data) if isinstance(data, dict) else None
    if choice is None or data.get("prompt_token_ids") is None or choice.get("token_ids") is None:
        return ("no_tokens", f"{where}: no prompt and sampled token ids recorded")
    prompt, sampled, logprobs = (
        data["prompt_token_ids"],
        choice["token_ids"],
        choice.get("logprobs"),
    )
    if not _ids(prompt) or not _ids(sampled):
        return ("bad_tokens", f"{where}: token ids that are not int32 ids")
    if logprobs is None:
        return ("no_logprobs", f"{where}: no logprobs of its sampled tokens")
    if not isinstance(logprobs, list) or not _logprobs(logprobs):
        return ("bad_tokens", f"{where}: logprobs that are not finite numbers")
    if len(logprobs) != len(sampled):
        return (
            "token_mismatch",
            f"{where}: {len(sampled)} sampled tokens but {len(logprobs)} logprobs",
        )
    counts = _usage_mismatch(usage, len(prompt), data["choices"])
    if counts:
        return ("token_mismatch", f"{where}: {counts}")
    return prompt, sampled, logprobs


def _usage_mismatch(usage: dict[str, int] | None, prompt: int, choices: list[Any]) -> str | None:
    """Usage disagreeing with the ids: the ids are not those the server counted."""
    if usage is None:
        return None
    if usage["prompt_tokens"] != prompt:
        return f"usage says {usage['prompt_tokens']} prompt tokens, the ids are {prompt}"
    lengths = [c.get("token_ids") for c in choices if isinstance(c, dict)]
    if all(isinstance(ids, list) for ids in lengths):
        sampled = sum(len(ids) for ids in lengths if isinstance(ids, list))
        if usage["completion_tokens"] != sampled:
            return (
                f"usage says {usage['completion_tokens']} completion tokens, "
                f"the sampled ids are {sampled}"
            )
    return None


def first_difference(prompt: list[int], before: StepTokens) -> int | None:
    """Where ``prompt`` stops extending ``before``'s prompt and sampled ids; None when it does."""
    n, m = len(before.prompt), len(before.sampled)
    if len(prompt) >= n + m and prompt[:n] == before.prompt and prompt[n : n + m] == before.sampled:
        return None
    expected = before.prompt + before.sampled
    for pos, (a, b) in enumerate(zip(prompt, expected, strict=False)):
        if a != b:
            return pos
    return min(len(prompt), len(expected))


def plan_samples(steps: list[StepTokens], branches: int) -> TokenSamples:
    """Cut sound steps (in row order, each after the step it extends) into samples."""
    by_index = {s.index: s for s in steps}
    head: dict[int, int] = {}  # step -> the first step of the prefix run through it
    breaks: list[dict[str, int]] = []
    for step in steps:
        head[step.index] = step.index
        if step.parent is None:
            continue
        parent = by_index[step.parent]
        pos = first_difference(step.prompt, parent)
        if pos is None:
            head[step.index] = head[parent.index]
        else:
            breaks.append({"exchange_index": step.index, "branch": step.branch, "position": pos})
    samples: list[Sample] = []
    counts = [0] * branches
    for branch in range(branches):
        own = [s for s in steps if s.branch == branch]
        for pos, step in enumerate(own):
            ends_run = pos + 1 == len(own) or head[own[pos + 1].index] == own[pos + 1].index
            if ends_run:
                samples.append(Sample(branch, counts[branch], _run(step, head, by_index)))
                counts[branch] += 1
    return TokenSamples((), tuple(samples), tuple(counts), tuple(breaks), tuple(steps))


def _run(
    last: StepTokens, head: dict[int, int], by_index: dict[int, StepTokens]
) -> tuple[StepTokens, ...]:
    run = [last]
    while run[-1].index != head[last.index]:
        run.append(by_index[run[-1].parent])  # type: ignore[index]
    return tuple(reversed(run))


def plan(
    steps: list[dict[str, Any]],
    branches: int,
    requests: dict[int, dict[str, Any]],
    outcomes: dict[int, dict[str, Any]],
    usages: dict[int, dict[str, int] | None],
) -> TokenSamples:
    """The token samples of a row's kept ``steps``, read from the raw records."""
    sound: list[StepTokens] = []
    problems: list[Problem] = []
    unknown: list[Problem] = []
    entries: list[dict[str, Any]] = []
    for step in steps:
        i = step["exchange_index"]
        asked = token_exchange(requests[i], outcomes[i])[0]
        sampling = step_sampling(asked)
        entries.append(sampling.section(i, constraint(asked.get("body"), sampling)))
        found = step_tokens(step, requests[i], outcomes[i], usages.get(i), sampling)
        if isinstance(found, StepTokens):
            sound.append(found)
        else:
            problems.append(found)
        problem = sampling_problem(sampling, f"step {i}")
        if problem is not None:
            unknown.append(problem)
    if problems or unknown:
        # sound token data stays known (other formats carry it) though it gives no samples
        held = () if problems else tuple(sound)
        return TokenSamples(
            tuple(problems + unknown), (), (0,) * branches, (), held, tuple(entries)
        )
    return replace(plan_samples(sound, branches), sampling=tuple(entries))


@dataclass(frozen=True)
class SampleTokens:
    """A sample's per-token columns."""

    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]
    temperatures: list[float]
    constrained: list[bool]
    advantages: list[float]
    policy_versions: list[int] | None = None
    """Per token, the policy version of the step that added it; None when not recorded."""


def sample_tokens(
    sample: Sample, advantage: float = 0.0, train_constrained: bool = False
) -> SampleTokens:
    """Lay a sample's steps out token by token.

    ``logprobs`` holds the sampler's logprob on the sampled tokens of the sample's own
    steps (0 elsewhere); ``constrained`` is true on the sampled tokens a grammar shaped;
    ``mask`` is true on the sampled tokens of the sample's own steps, less the constrained
    ones unless ``train_constrained``; ``advantages`` is ``advantage`` where ``mask`` is
    true, 0 elsewhere. Each step's temperature covers the tokens it added (the new prompt
    tokens and its sampled ones). Each step's policy version covers the
    tokens it added too (:mod:`contagent.rules.policy_versions`). Floats are rounded to float32 as stored.
    """
    last = sample.steps[-1]
    token_ids = last.prompt + last.sampled
    n = len(token_ids)
    mask = [False] * n
    logprobs = array("f", bytes(4 * n))
    temperatures = array("f", [_NAN]) * n
    marks = [False] * n
    spans: list[tuple[int, int, int | None]] = []
    start = 0
    for step in sample.steps:
        a = len(step.prompt)
        b = a + len(step.sampled)
        temperatures[start:b] = array("f", [step.temperature]) * (b - start)
        for lo, hi in step.constrained:
            marks[a + lo : a + hi] = [True] * (hi - lo)
        if step.branch == sample.branch:
            mask[a:b] = [True] * (b - a)
            logprobs[a:b] = array("f", step.logprobs)
        spans.append((start, b, step.version))
        start = b
    if not train_constrained:
        mask = [m and not c for m, c in zip(mask, marks, strict=True)]
    versions = token_versions(spans, n)
    value = array("f", [advantage])[0]
    advantages = [value if m else 0.0 for m in mask]
    return SampleTokens(
        token_ids,
        mask,
        logprobs.tolist(),
        temperatures.tolist(),
        marks,
        advantages,
        versions,
    )


def selected_for_tokens(row: dict[str, Any], rollout_filter: str) -> bool:
    """Does a results row's rollout give token samples under ``rollout_filter`` (``--filter``)?

    Its kept steps must be sound: every not-ready kind it has is the model's own
    behaviour (:data:`contagent.rules.rl.NOT_READY_CLASS`: RL learns from the model's
    mistakes, and masks overlong rollouts rather than dropping them), and every kept
    step has sound token data and a known temperature. Then ``--filter`` applies as for
    the other formats.
    """
    tokens = row.get("tokens")
    if not isinstance(tokens, dict) or tokens.get("kinds"):
        return False
    if model_kinds(row) is None:
        return False
    return rollout_filter == "all" or row.get("passed") is True
