"""The options of ``contagent run``, in groups; each command parameter names one of these.

Defaults stay on the command's parameters (typer reads them there).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from contagent.agents import AGENTS, DEFAULT_AGENT
from contagent.errors import ContagentError

COMPAT_PANEL = "Compatibility options (accepted, not needed)"
#: Options of the seed pipeline's command lines: accepted, each with why it is not needed.
NOT_NEEDED = {
    "--network": "each rollout gets its own isolated network, and the agent reaches the LLM "
    "only through the recording proxy",
    "--vllm-internal-url": "the agent is given the recording proxy's address, never the "
    "server's; --vllm-url is the one server address",
    "--entrypoint-script": "the runner image's entrypoint and contagent's in-container driver "
    "start the agent",
    "--agent-server-image-repo": "the agent runs headless in its runner image, and no agent "
    "server is started; name that image with --image AGENT=NAME",
    "--agent-server-image-tag": "the agent runs headless in its runner image, and no agent "
    "server is started; name that image with --image AGENT=NAME",
}


def extra_body(value: str | None) -> dict[str, Any]:
    """The ``--extra-body`` given, as the object it must be."""
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ContagentError(f"--extra-body is not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ContagentError("--extra-body must be a JSON object")
    return data


def _not_needed(option: str) -> Any:
    return typer.Option(
        option, help=f"Not needed: {NOT_NEEDED[option]}.", rich_help_panel=COMPAT_PANEL
    )


# -- The LLM server, waiting for it, and the raw log's token data --------------------------

ServedModelName = Annotated[str, typer.Option(help="Model name the LLM server serves.")]
VllmUrl = Annotated[
    str,
    typer.Option(
        help="The OpenAI-compatible LLM server the proxy forwards to (with or without /v1)."
    ),
]
ApiKey = Annotated[
    str | None,
    typer.Option(
        envvar="CONTAGENT_API_KEY",
        help="Key for the LLM server; given to the proxy only, never to the agent (default: none).",
    ),
]
VllmCa = Annotated[
    Path | None,
    typer.Option(
        help="PEM file of the CA(s) signing an https --vllm-url's certificate "
        "(instead of the system's store, the default)."
    ),
]
Tokens = Annotated[
    str,
    typer.Option(
        help="Record token ids and logprobs of chat completions: auto (when the LLM "
        "server is vLLM), on (an error unless it is), off. See docs/tokens.md."
    ),
]
WaitForLlm = Annotated[
    float,
    typer.Option(
        help="Seconds to wait for the LLM server to answer GET /v1/models listing "
        "--served-model-name, before the run and when rollouts fail on it mid-run "
        "(0: do not wait)."
    ),
]

# -- What runs: experiments, agents, their images and network ------------------------------

ExperimentsDir = Annotated[Path, typer.Option(help="Folder of experiment folders.")]
Experiment = Annotated[
    list[str] | None,
    typer.Option(help="Run only this experiment (repeatable; default: every one)."),
]
LogDir = Annotated[Path, typer.Option(help="Where logs and rollout folders go.")]
SkillsDir = Annotated[Path, typer.Option(help="Folder of skill folders (<name>/SKILL.md).")]
Agent = Annotated[
    list[str] | None,
    typer.Option(
        help=f"Agent to run each experiment with (repeatable; default {DEFAULT_AGENT}): "
        f"{', '.join(AGENTS)}. With several, rollout names end in __<agent>."
    ),
]
Image = Annotated[
    list[str] | None,
    typer.Option(
        help="AGENT=NAME: the runner image AGENT runs in (repeatable; default: the "
        "image `contagent build --agent AGENT` makes)."
    ),
]
AllowInternet = Annotated[
    bool,
    typer.Option(
        "--allow-internet",
        help="Harbor tasks: give the agent phase a route out too (the LLM still "
        "goes through the recording proxy). Default: off, no route out.",
    ),
]
TaskEnv = Annotated[
    list[str] | None,
    typer.Option(
        help="A host variable a Harbor task's ${VAR} env values may read (repeatable); "
        "no other is ever read (default: none)."
    ),
]
OpenhandsImage = Annotated[
    str | None, typer.Option(help="Same as --image openhands=NAME (default: as --image).")
]

# -- How it runs: parallelism, repeats, limits ---------------------------------------------

Jobs = Annotated[
    int, typer.Option(help="Rollouts in parallel (across the cluster with --ray-address).")
]
RayAddress = Annotated[
    str | None,
    typer.Option(
        help="Run each rollout as a task on this Ray cluster (`auto` or HOST:PORT; "
        "needs `pip install 'contagent\\[ray]'`); default: on this host."
    ),
]
RolloutCpus = Annotated[
    float, typer.Option(help="CPUs each rollout's Ray task asks for (with --ray-address).")
]
Repeat = Annotated[int, typer.Option(help="Rollouts per experiment.")]
Timeout = Annotated[
    float,
    typer.Option(
        help="Seconds per rollout (setup, agent and evaluation) before it is stopped as `timeout`."
    ),
]
MaxIterations = Annotated[int, typer.Option(help="Agent iteration limit.")]

# -- The agent's LLM settings --------------------------------------------------------------

Temperature = Annotated[
    float | None,
    typer.Option(help="Sampling temperature sent to the server (default: not sent)."),
]
TopP = Annotated[float | None, typer.Option(help="top_p sent to the server (default: not sent).")]
ReasoningEffort = Annotated[
    str | None,
    typer.Option(
        help="reasoning_effort sent to the server (default: not sent; OpenHands would send 'high')."
    ),
]
MaxOutputTokens = Annotated[
    int | None, typer.Option(help="Completion token limit per call (default: not sent).")
]
ExtraBody = Annotated[
    str | None,
    typer.Option(
        help="JSON object merged into every request body, e.g. '{\"top_k\": 20}' (default: none)."
    ),
]
LlmTimeout = Annotated[
    float, typer.Option(help="Seconds per LLM request before the agent gives up on it.")
]
LlmRetries = Annotated[
    int,
    typer.Option(
        help="Times the agent re-sends a failed LLM request (each is a duplicate in the log)."
    ),
]
# -- The run itself ------------------------------------------------------------------------

Resume = Annotated[
    bool,
    typer.Option(help="Skip rollouts already finished in --log-dir; re-run unfinished ones."),
]
RunId = Annotated[
    str | None,
    typer.Option(help="Name of this run (labels on its containers); default: time + random."),
]
StreamSamples = Annotated[
    Path | None,
    typer.Option(
        help="Append each finished group (an experiment's --repeat rollouts with one agent) "
        "as one JSON line naming its samples' Parquet shard under --log-dir/stream/ to this "
        "file or named pipe; a pipe with no reader holds the run back (docs/engine.md). "
        "Default: off.",
    ),
]

# -- Accepted from the seed pipeline's command lines, not needed ---------------------------

Network = Annotated[str | None, _not_needed("--network")]
VllmInternalUrl = Annotated[str | None, _not_needed("--vllm-internal-url")]
EntrypointScript = Annotated[str | None, _not_needed("--entrypoint-script")]
AgentServerImageRepo = Annotated[str | None, _not_needed("--agent-server-image-repo")]
AgentServerImageTag = Annotated[str | None, _not_needed("--agent-server-image-tag")]
