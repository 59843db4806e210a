"""What a vLLM upstream's logprobs describe, and its default sampling, asked once at start.

**Logprobs mode.** vLLM reports logprobs in one of four modes (``--logprobs-mode``):
``raw_logprobs`` (its default: the model's own, before temperature, top-p/top-k and logit
processors), ``processed_logprobs`` (after them: the distribution the token was sampled
from), ``raw_logits`` and ``processed_logits``. The probe asks for the first token of one fixed
prompt twice, with a seed, at temperatures 1 and 0.5, and reads the top logprobs of that one
position. Temperature T divides the logits, so processed logprobs at 0.5 spread the gaps
between tokens twice as wide as at 1, while raw logprobs stay the same. Logits are no
logprobs: a value above 0 means a logits mode, which is refused.

**Default sampling.** Where the server offers it (vLLM's chat render route,
:data:`contagent.wire.chat_completions.RENDER_ROUTE`, with ``--enable-scale-out``), a request that sets no sampling parameter is rendered, and its
``sampling_params`` are the server's defaults for what a client leaves out.
"""

from __future__ import annotations

from typing import Any

from contagent.errors import ContagentError
from contagent.proxy.sampling_options import server_defaults
from contagent.proxy.upstream_ask import UpstreamAsk
from contagent.wire.chat_completions import RENDER_ROUTE, ROUTE
from contagent.wire.translate import template_probe

#: the probe's fixed request: temperatures, seed, how many top logprobs
PROBE_TEMPERATURES = (1.0, 0.5)
PROBE_SEED = 0
PROBE_TOP = 5
PROBE_PROMPT = "Name one colour."
#: the smallest gap (nats, at temperature 1) between the top token and another that tells
#: the modes apart; a flatter distribution leaves the mode unknown
MIN_GAP = 0.05
#: a logprob above this is a logit (logprobs are at most 0; a little float noise allowed)
MAX_LOGPROB = 1e-4
#: answers are untrusted input: larger ones are not read
MAX_ANSWER_BYTES = 1024 * 1024


class LogitsRefused(ContagentError):
    """The upstream reports logits, not logprobs: token data would be wrong."""


def probe_body(model: str, temperature: float) -> dict[str, Any]:
    """The probe's chat request at ``temperature``: one token, its top logprobs, every other
    sampling parameter neutral so that only the temperature differs."""
    return {
        "model": model,
        "messages": [{"role": "user", "content": PROBE_PROMPT}],
        "max_tokens": 1,
        "temperature": temperature,
        "top_p": 1.0,
        "top_k": 0,
        "min_p": 0.0,
        "seed": PROBE_SEED,
        "logprobs": True,
        "top_logprobs": PROBE_TOP,
        "return_tokens_as_token_ids": True,
    }


def first_top_logprobs(answer: Any) -> dict[str, float] | None:
    """token -> logprob of the first position's top logprobs in a chat completion."""
    try:
        entry = answer["choices"][0]["logprobs"]["content"][0]
        tops = entry["top_logprobs"]
    except (KeyError, IndexError, TypeError):
        return None
    out: dict[str, float] = {}
    for top in tops if isinstance(tops, list) else ():
        if not isinstance(top, dict):
            continue
        token, value = top.get("token"), top.get("logprob")
        if isinstance(token, str) and isinstance(value, (int, float)) and value == value:
            out[token] = float(value)
    return out or None


def judge(at_one: dict[str, float], at_half: dict[str, float]) -> tuple[str | None, str]:
    """(the mode or None, the line that says how); raises :class:`LogitsRefused`."""
    highest = max([*at_one.values(), *at_half.values()])
    if highest > MAX_LOGPROB:
        raise LogitsRefused(
            f"the upstream reports logits, not logprobs (a value of {highest:.3g} > 0: "
            "--logprobs-mode raw_logits or processed_logits); serve vLLM with "
            "--logprobs-mode processed_logprobs, or record with --tokens off"
        )
    common = [t for t in at_one if t in at_half]
    if len(common) < 2:
        return None, "probe inconclusive: the two answers share fewer than 2 top tokens"
    top = max(common, key=lambda t: at_one[t])
    other = min(common, key=lambda t: at_one[t])
    gap_one = at_one[top] - at_one[other]
    if gap_one < MIN_GAP:
        return None, f"probe inconclusive: the top logprobs lie within {gap_one:.3f} nats"
    ratio = (at_half[top] - at_half[other]) / gap_one
    seen = f"gaps at temperature 0.5 are {ratio:.2f}x those at 1 over {len(common)} tokens"
    if abs(ratio - 1.0) < 0.25:
        return "raw_logprobs", f"probed: {seen} (raw: before temperature)"
    if abs(ratio - 1.0 / PROBE_TEMPERATURES[1]) < 0.5:
        return "processed_logprobs", f"probed: {seen} (processed: after temperature)"
    return None, f"probe inconclusive: {seen}"


def probe_logprobs_mode(
    ask: UpstreamAsk, base: str, model: str, headers: dict[str, str]
) -> tuple[str | None, str]:
    """Ask ``base`` (a vLLM) the probe at both temperatures and judge the answers."""
    seen: list[dict[str, float]] = []
    for temperature in PROBE_TEMPERATURES:
        status, answer = ask.post(
            base + ROUTE, probe_body(model, temperature), headers, MAX_ANSWER_BYTES
        )
        tops = first_top_logprobs(answer) if status == 200 else None
        if tops is None:
            return None, (
                f"probe inconclusive: the request at temperature {temperature:g} answered "
                f"{status} without top logprobs"
            )
        seen.append(tops)
    return judge(seen[0], seen[1])


def render_defaults(
    ask: UpstreamAsk, base: str, model: str, headers: dict[str, str]
) -> tuple[dict[str, Any] | None, str]:
    """(the server's default sampling, or None; the line that says where it came from)."""
    body = {"model": model, "messages": [{"role": "user", "content": PROBE_PROMPT}]}
    status, answer = ask.post(base + RENDER_ROUTE, body, headers, MAX_ANSWER_BYTES)
    params = answer.get("sampling_params") if isinstance(answer, dict) else None
    found = server_defaults(params) if status == 200 else None
    if found is None:
        return None, (
            f"server sampling defaults unknown (POST {RENDER_ROUTE} answered "
            f"{status}; vLLM serves it with --enable-scale-out)"
        )
    return found, f"server sampling defaults from POST {RENDER_ROUTE}"


def probe_inline_system(
    ask: UpstreamAsk,
    base: str,
    model: str,
    headers: dict[str, str],
    chat_template: str | None = None,
) -> tuple[str | None, str]:
    """How the server's Messages route renders a system message inside ``messages``
    (:mod:`contagent.wire.translate.template_probe`): ``merged`` into the leading system prompt
    when its template refuses one after the first turn, else ``in_place``; None: unknown."""
    probe = template_probe.merge_probe(model, chat_template)
    status, _ = ask.post(base + ROUTE, probe, headers, MAX_ANSWER_BYTES)
    merged = template_probe.merge_decision(status)
    if merged is None:
        return None, f"unknown (the probe answered {status})"
    if merged:
        return "merged", "merged into the leading system prompt (the template refuses it later)"
    return "in_place", "kept in place (the template takes it)"


def probe_thinking_off(
    ask: UpstreamAsk, base: str, model: str, headers: dict[str, str], chat_template: str | None
) -> tuple[str | None, str]:
    """The ``reasoning_effort`` vLLM's Messages route sends for ``thinking: disabled``
    (:func:`contagent.wire.translate.template_probe.disabled_thinking_effort`): the prompt
    ``"Hi"`` rendered under each effort, compared; None: unknown (a probe went unanswered)."""
    prompts: dict[str, list[int] | None] = {}
    for effort, body in template_probe.effort_probes(model, chat_template).items():
        status, answer = ask.post(base + ROUTE, body, headers, MAX_ANSWER_BYTES)
        if status not in (200, 400):  # 400: the template refuses that effort
            return None, f"unknown (the probe at effort {effort} answered {status})"
        prompts[effort] = template_probe.prompt_ids(status, answer)
    effort = template_probe.disabled_thinking_effort(prompts)
    if effort == "none":
        return effort, "reasoning_effort none (the template turns thinking off)"
    return effort, "reasoning_effort low (the template cannot turn thinking off)"
