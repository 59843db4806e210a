"""What a rollout engine is asked to do: ``contagent run``'s options plus the engine's own."""

from __future__ import annotations

from dataclasses import dataclass, field

from contagent.errors import ContagentError
from contagent.export.exporter import ExportOptions
from contagent.runner.config import RunConfig


@dataclass(frozen=True)
class EngineConfig:
    """``run``: the run's options (``experiments_dir``, ``log_dir``, the LLM, agents, ``jobs``:
    rollouts at once); its ``experiments`` and ``repeat`` are not used, tasks come by
    :meth:`~contagent.engine.Engine.submit`."""

    run: RunConfig
    max_groups: int = 16
    """Groups submitted and not yet taken by the trainer; :meth:`submit` waits beyond it."""
    infra_retries: int = 2
    """Times a rollout that ends in ``infra_error`` runs again before its group is delivered
    with it among ``failed``."""
    max_off_policy_steps: int | None = None
    """A delivered sample whose oldest token is more than this many versions behind the
    current policy version is dropped (counted per group); None keeps every sample."""
    export: ExportOptions = field(default_factory=ExportOptions)
    """How samples are made, as ``contagent export`` takes them (``advantage``,
    ``train_constrained``, ``allow_raw_logprobs``, ``max_raw_log``); its formats and filter
    are the tokens format's and ``all``."""
    policy_version: int = 0
    """The policy version the engine starts at (a server with its own version: at least it)."""
    server_versions: str = "auto"
    """``auto``: where the LLM server serves vLLM's dev-mode ``/weight_info``, ``/pause`` and
    ``/resume`` (``VLLM_SERVER_DEV_MODE=1``), its ``weight_version`` is the policy version and
    a pause pauses it too (``mode=wait``); ``on``: refuse a server without them; ``off``:
    never ask (the versions are :meth:`~contagent.engine.Engine.set_policy_version`'s)."""

    def __post_init__(self) -> None:
        if self.max_groups < 1:
            raise ContagentError("max_groups must be 1 or more")
        if self.infra_retries < 0:
            raise ContagentError("infra_retries must be 0 or more")
        if self.max_off_policy_steps is not None and self.max_off_policy_steps < 0:
            raise ContagentError("max_off_policy_steps must be 0 or more (or None)")
        if self.export.max_raw_log < 1:
            raise ContagentError("export.max_raw_log must be at least 1 byte")
        if self.server_versions not in ("auto", "on", "off"):
            raise ContagentError("server_versions is auto, on or off")
        if self.policy_version < 0:
            raise ContagentError("policy_version must be 0 or more")
