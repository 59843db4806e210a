"""``result.json``: what ``contagent run`` knows about a rollout's outcome.

A rollout folder holds it beside its raw exchange log (:mod:`contagent.rawlog.records`);
:class:`RolloutResult` is its one model, and its parts (exit codes, phase timings,
token totals, the agent's LLM settings) are defined here with it.
"""

from __future__ import annotations

import types
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from contagent.errors import ContagentError
from contagent.model_schema import first_error
from contagent.rawlog.records import ServerInfo
from contagent.versions import read_optional, version_field, versioned_object

#: ``result.json``'s version; 2 added ``server``, 3 the server's ``logprobs_mode``, 4 its
#: ``inline_system``, 5 its ``thinking_off_effort`` and ``max_model_len``.
RESULT_SCHEMA_VERSION = 5

RolloutStatus = Literal["passed", "failed", "agent_error", "timeout", "infra_error"]


class ExitCodes(BaseModel):
    """Exit codes of each phase in the runner container; null when the phase did not run."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    setup: int | None = Field(None, description="setup.sh exit code.")
    agent: int | None = Field(
        None,
        description="0 when the agent ran to an end (finished or iteration limit), 1 when it raised.",
    )
    evaluate: int | None = Field(None, description="evaluate.sh exit code; 0 is a pass.")
    container: int | None = Field(
        None, description="Exit code of the runner container (137 when killed at the timeout)."
    )


class PhaseTimings(BaseModel):
    """Seconds spent in each phase; ``overhead_s`` is the runner's own share."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    setup_s: float | None = Field(None, description="setup.sh wall time.")
    agent_s: float | None = Field(None, description="Agent wall time (import, set-up and run).")
    evaluate_s: float | None = Field(None, description="evaluate.sh wall time.")
    container_s: float | None = Field(
        None, description="Runner container run time, start to exit, as the Docker engine saw it."
    )
    wall_s: float = Field(
        description="Whole rollout as the host saw it, network creation to cleanup."
    )
    overhead_s: float | None = Field(
        None, description="wall_s minus setup, agent and evaluation: what the runner itself costs."
    )


class TokenTotals(BaseModel):
    """Usage summed over every exchange of the rollout's raw log that reports usage."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    exchanges: int = Field(0, description="Requests recorded in exchanges.jsonl.")
    with_usage: int = Field(0, description="Outcomes that carried usage.")
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0


class LlmSettings(BaseModel):
    """The LLM settings the agent ran with, as configured in the container."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    model: str = Field(
        description="The model as the agent was given it, e.g. openai/<served-model-name> for OpenHands."
    )
    base_url: str = Field(description="The recording proxy's URL for this rollout.")
    num_retries: int = Field(
        description="LLM call retries by the SDK (0: a failed call is not re-sent)."
    )
    timeout_s: float = Field(description="Per-request timeout in seconds.")
    reasoning_effort: str | None = Field(None, description="Sent only when set; null: not sent.")
    temperature: float | None = Field(None, description="Sent only when set.")
    top_p: float | None = Field(None, description="Sent only when set.")
    max_output_tokens: int | None = Field(None, description="Sent only when set.")
    extra_body: dict[str, Any] = Field(
        default_factory=dict, description="Keys merged at the top level of every request body."
    )
    max_iterations: int = Field(description="Agent iteration limit per run.")


class RolloutResult(BaseModel):
    """``result.json``: what the runner knows about a rollout's outcome."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: int = version_field(RESULT_SCHEMA_VERSION, "result.json")
    rollout_id: str
    experiment: str | None = None
    model: str | None = None
    status: RolloutStatus | None = Field(None, description="Overall verdict of the rollout.")
    passed: bool | None = None
    reward: float | None = None
    rewards: dict[str, float] | None = Field(
        None,
        description="Every named reward the verifier wrote (a Harbor task's reward.json); "
        "`reward` is the main one.",
    )
    stop_condition: str | None = Field(
        None,
        description="Why the agent stopped: finished, max_iterations, timeout, error, stuck, ...",
    )
    started: float | None = None
    ended: float | None = None
    duration_s: float | None = None
    run_id: str | None = Field(None, description="The `contagent run` that made this rollout.")
    repeat_index: int | None = Field(
        None, ge=0, description="Which repeat of the experiment (0-based)."
    )
    image: str | None = Field(None, description="Runner image the rollout ran in.")
    node: str | None = Field(
        None,
        description="Where the rollout ran: the host name, with `/<Ray node id prefix>` "
        "appended on a Ray cluster.",
    )
    agent: str | None = Field(None, description="The agent that ran (`contagent run --agent`).")
    agent_version: str | None = Field(None, description="The agent's version in the image.")
    exit_codes: ExitCodes | None = None
    timings: PhaseTimings | None = None
    iterations: int | None = Field(None, ge=0, description="Agent steps (LLM responses acted on).")
    tokens: TokenTotals | None = None
    llm: LlmSettings | None = Field(None, description="Effective LLM settings of the agent.")
    wire_params: dict[str, Any] | None = Field(
        None,
        description="Settings seen on the wire in the first recorded request body "
        "(every key except messages, tools, and the Responses API's input and instructions).",
    )
    openhands_version: str | None = Field(
        None,
        exclude=True,
        description="Read as agent_version where a result.json has only this key; never written.",
    )
    skills_loaded: list[str] | None = Field(None, description="Skills the agent was given.")
    reference_solution: bool | None = Field(
        None,
        description="The task's own reference solution ran in place of a model (the agent "
        "declares it): the rollout shows the task is solvable and is never training data.",
    )
    error: str | None = Field(None, description="One line on what went wrong, if anything.")
    server: ServerInfo | None = Field(
        None, description="The LLM server the run's preflight found, when it knows which."
    )

    @model_validator(mode="after")
    def _one_agent_version(self) -> RolloutResult:
        if self.agent_version is None:
            self.agent_version = self.openhands_version
        self.openhands_version = None
        return self


def _read_json(path: Path) -> dict[str, Any] | None:
    """``result.json``'s object, through the version gate; None when there is none."""
    data = read_optional(path)
    return None if data is None else versioned_object(data, str(path), RESULT_SCHEMA_VERSION)


def load_result(path: Path) -> RolloutResult | None:
    """The rollout's ``result.json`` as a :class:`RolloutResult`, or None when there is none.

    Raises :class:`~contagent.versions.NewerVersionError` for a newer one and
    :class:`ContagentError` for one that is unreadable or not of the model's shape.
    """
    value = _read_json(path)
    if value is None:
        return None
    try:
        return RolloutResult.model_validate(value)
    except ValidationError as exc:
        raise ContagentError(f"{path}: {first_error(exc, 'result')}") from None


def read_result(path: Path, checked: Iterable[str] = ()) -> dict[str, Any] | None:
    """The rollout's ``result.json`` as a dict (the fast path: no model built), or None when
    there is none; its version goes through the gate, and each field named in ``checked`` must
    be null or of the type :class:`RolloutResult` gives it."""
    value = _read_json(path)
    if value is None:
        return None
    for name, kinds in field_types(tuple(checked)).items():
        field_value = value.get(name)
        if field_value is not None and (
            not isinstance(field_value, kinds)
            or (isinstance(field_value, bool) and bool not in kinds)
        ):
            raise ContagentError(
                f"{path}: {name} is {field_value!r}, not {' or '.join(t.__name__ for t in kinds)}"
            )
    return value


@lru_cache(maxsize=8)
def field_types(names: tuple[str, ...]) -> dict[str, tuple[type, ...]]:
    """The JSON types each of ``names`` may take in a ``result.json`` (besides null), read
    from :class:`RolloutResult`'s annotations: a float field takes an integer too."""
    return {name: _json_types(RolloutResult.model_fields[name].annotation) for name in names}


def _json_types(annotation: Any) -> tuple[type, ...]:
    if get_origin(annotation) in (Union, types.UnionType):
        return tuple(t for arg in get_args(annotation) for t in _json_types(arg))
    if get_origin(annotation) is Literal:
        return tuple(dict.fromkeys(type(arg) for arg in get_args(annotation)))
    if annotation is type(None):
        return ()
    if annotation is float:
        return (int, float)
    assert isinstance(annotation, type), annotation
    return (annotation,)
