"""Harbor task folders, mapped onto the runner's experiment model.

::

    <task>/
    ├── task.toml          [task] name, [agent], [verifier], [environment], [solution]
    ├── instruction.md     the task text, the agent's first message
    ├── environment/       Dockerfile (build context), or task.toml's docker_image
    ├── tests/test.sh      the verifier; writes /logs/verifier/reward.json or reward.txt
    └── solution/solve.sh  optional; what ``--agent oracle`` runs

Fields are judged by their value, not their presence (Harbor's models fill
defaults such as ``gpus = 0`` and ``mcp_servers = []``). A value contagent does
not support makes the task invalid with a one-line reason naming the field.
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.runner.tasks.experiment import ExperimentSpec
from contagent.textfile import read_text

TASK_FILE = "task.toml"
#: Bounds on what is read of a task folder (untrusted input).
TOML_LIMIT_BYTES = 1024 * 1024
INSTRUCTION_LIMIT_BYTES = 1024 * 1024
ENVIRONMENT_LIMIT_BYTES = 512 * 1024 * 1024
ENVIRONMENT_LIMIT_FILES = 20_000
#: Harbor's default timeouts (seconds) where task.toml gives none.
DEFAULT_VERIFIER_TIMEOUT_S = 600.0

NetworkMode = Literal["public", "no-network", "allowlist"]
_TEMPLATE = re.compile(r"\$\{([^}:]+)(?::-(.*))?\}")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Package(_Model):
    name: str
    version: str | None = None
    description: str = ""
    authors: list[dict[str, Any]] = []
    keywords: list[str] = []


class _Phase(_Model):
    timeout_sec: float | None = None
    user: str | int | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class _Verifier(_Phase):
    env: dict[str, str] = {}
    environment_mode: Literal["shared", "separate"] | None = None
    environment: dict[str, Any] | None = None
    collect: list[dict[str, Any]] = []


class _Healthcheck(_Model):
    command: str
    interval_sec: float = 5.0
    timeout_sec: float = 30.0
    start_period_sec: float = 0.0
    start_interval_sec: float = 5.0
    retries: int = 3


class _Environment(_Model):
    build_timeout_sec: float = 600.0
    docker_image: str | None = None
    os: str = "linux"
    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    memory: str | None = None
    storage: str | None = None
    gpus: int | None = None
    gpu_types: list[str] | None = None
    tpu: dict[str, Any] | None = None
    mcp_servers: list[dict[str, Any]] = []
    env: dict[str, str] = {}
    skills_dir: str | None = None
    healthcheck: _Healthcheck | None = None
    workdir: str | None = None
    allow_internet: bool | None = None
    network_mode: NetworkMode | None = None
    allowed_hosts: list[str] | None = None


class _Solution(_Model):
    env: dict[str, str] = {}


class _TaskToml(_Model):
    schema_version: str | None = None
    version: str | None = None
    task: _Package | None = None
    metadata: dict[str, Any] = {}
    verifier: _Verifier = _Verifier()
    agent: _Phase = _Phase()
    environment: _Environment = _Environment()
    solution: _Solution = _Solution()
    source: str | None = None
    multi_step_reward_strategy: str | None = None
    steps: list[dict[str, Any]] | None = None
    artifacts: list[Any] = []


@dataclass(frozen=True)
class Healthcheck:
    command: str
    interval_s: float
    timeout_s: float
    start_period_s: float
    start_interval_s: float
    retries: int


@dataclass(frozen=True)
class HarborTask:
    """One checked Harbor task folder: what a rollout of it needs, host values resolved."""

    name: str
    root: Path
    spec: ExperimentSpec
    #: ``docker_image`` of task.toml, else None (built from environment/Dockerfile)
    docker_image: str | None
    #: sha256 of environment/ (paths, modes, bytes): the task image's cache key
    environment_hash: str
    agent_timeout_s: float | None
    verifier_timeout_s: float
    build_timeout_s: float
    cpus: float | None
    memory_mb: int | None
    storage_mb: int | None
    workdir: str | None
    env: dict[str, str]
    verifier_env: dict[str, str]
    solution_env: dict[str, str]
    agent_user: str | None
    verifier_user: str | None
    healthcheck: Healthcheck | None
    agent_network: NetworkMode
    verifier_network: NetworkMode
    #: ``[environment] skills_dir``: the folder of skills (``<name>/SKILL.md``) in the task
    #: image, every one given to an agent that honours skills
    skills_path: str | None = None
    #: the seed format's host skill folders; a Harbor task's skills are in its image
    skill_dirs: tuple[Path, ...] = field(default_factory=tuple)
    kind: str = "harbor"

    @property
    def environment_dir(self) -> Path:
        return self.root / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.root / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.root / "solution"

    @property
    def has_solution(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()

    @property
    def wants_internet(self) -> bool:
        """The task asks for a route out while the agent works (contagent gives none)."""
        return self.agent_network != "no-network"

    @property
    def skills_wanted(self) -> tuple[str, ...]:
        return (f"every skill in the task image's {self.skills_path}",) if self.skills_path else ()


def environment_hash(env_dir: Path) -> str:
    """The content hash of ``environment/``: every file's path, exec bit and bytes."""
    digest = hashlib.sha256()
    total = files = 0
    for path in sorted(env_dir.rglob("*")):
        rel = path.relative_to(env_dir).as_posix()
        info = path.lstat()
        if stat.S_ISLNK(info.st_mode):
            digest.update(f"L {rel} {os.readlink(path)}\n".encode())
        elif stat.S_ISREG(info.st_mode):
            files += 1
            total += info.st_size
            if files > ENVIRONMENT_LIMIT_FILES or total > ENVIRONMENT_LIMIT_BYTES:
                raise ContagentError(
                    f"{env_dir}: over {ENVIRONMENT_LIMIT_FILES} files or "
                    f"{ENVIRONMENT_LIMIT_BYTES} bytes"
                )
            digest.update(f"F {rel} {info.st_mode & 0o111:o} {info.st_size}\n".encode())
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        elif stat.S_ISDIR(info.st_mode):
            digest.update(f"D {rel}\n".encode())
    return digest.hexdigest()


def expand_env(values: dict[str, str], allowed: frozenset[str], where: str) -> dict[str, str]:
    """Harbor's ``${VAR}`` / ``${VAR:-default}`` values, read from the host only for the
    variables named with ``--task-env``; a default is used for any other."""
    out: dict[str, str] = {}
    for key, value in values.items():
        match = _TEMPLATE.fullmatch(value)
        if match is None:
            out[key] = value
            continue
        var, default = match.group(1), match.group(2)
        if var in allowed and var in os.environ:
            out[key] = os.environ[var]
        elif default is not None:
            out[key] = default
        elif var in allowed:
            raise ContagentError(f"{where} {key}: host variable {var} is not set")
        else:
            raise ContagentError(
                f"{where} {key}: ${{{var}}} reads a host variable; pass --task-env {var} to give it"
            )
    return out


def _unsupported(cfg: _TaskToml) -> str | None:
    """The first field whose value contagent does not support, as ``field = value``."""
    env, ver = cfg.environment, cfg.verifier
    checks: list[tuple[bool, str]] = [
        (bool(cfg.steps), "[[steps]] (multi-step tasks)"),
        (cfg.multi_step_reward_strategy is not None, "multi_step_reward_strategy"),
        (bool(cfg.artifacts), "artifacts"),
        (env.os.lower() != "linux", f"[environment] os = {env.os!r}"),
        (bool(env.gpus), f"[environment] gpus = {env.gpus}"),
        (env.tpu is not None, "[environment] tpu"),
        (bool(env.mcp_servers), "[environment] mcp_servers (MCP servers)"),
        (ver.environment_mode == "separate", "[verifier] environment_mode = 'separate'"),
        (ver.environment is not None, "[verifier.environment] (a separate verifier container)"),
        (bool(ver.collect), "[[verifier.collect]]"),
    ]
    for bad, what in checks:
        if bad:
            return what
    return None


def _network(
    phase: _Phase, env: _Environment, allow_default: bool | None
) -> tuple[NetworkMode, list[str]]:
    if phase.network_mode is not None:
        return phase.network_mode, list(phase.allowed_hosts or [])
    if env.network_mode is not None:
        return env.network_mode, list(env.allowed_hosts or [])
    if allow_default is not None:
        return ("public" if allow_default else "no-network"), []
    return "public", []


def _size_mb(value: str, where: str) -> int:
    text = value.strip().upper()
    units = {"G": 1024.0, "M": 1.0, "K": 1 / 1024}
    try:
        return int(float(text[:-1]) * units[text[-1]])
    except (KeyError, ValueError, IndexError):
        raise ContagentError(f"{where}: {value!r} is not a size like '1G' or '512M'") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{loc}: {err['msg']}{more}"


def _user(value: str | int | None) -> str | None:
    return None if value is None else str(value)


def _read_task_toml(file: Path) -> _TaskToml:
    """``task.toml`` parsed and checked against its model and what contagent supports."""
    try:
        raw = tomllib.loads(read_text(file, TOML_LIMIT_BYTES, TASK_FILE))
    except tomllib.TOMLDecodeError as exc:
        raise ContagentError(f"{file}: invalid TOML: {exc}") from None
    try:
        cfg = _TaskToml.model_validate(raw)
    except ValidationError as exc:
        raise ContagentError(f"{file}: {_first_error(exc)}") from None
    bad = _unsupported(cfg)
    if bad is not None:
        raise ContagentError(f"{file}: {bad} is not supported by contagent")
    return cfg


def _sizes(file: Path, env: _Environment) -> tuple[int | None, int | None]:
    """The environment's memory and storage limits in MB, each checked positive with cpus."""
    memory_mb = env.memory_mb
    if memory_mb is None and env.memory is not None:
        memory_mb = _size_mb(env.memory, f"{file}: [environment] memory")
    storage_mb = env.storage_mb
    if storage_mb is None and env.storage is not None:
        storage_mb = _size_mb(env.storage, f"{file}: [environment] storage")
    for what, value in (("cpus", env.cpus), ("memory_mb", memory_mb), ("storage_mb", storage_mb)):
        if value is not None and not value > 0:
            raise ContagentError(f"{file}: [environment] {what} = {value} must be positive")
    return memory_mb, storage_mb


def _checked_folder(root: Path, file: Path, cfg: _TaskToml) -> tuple[str, str]:
    """The task's name and instruction, once the folder holds what a task needs."""
    env = cfg.environment
    name = root.name
    if cfg.task is not None:
        name = cfg.task.name.rsplit("/", 1)[-1]
    try:
        name = safe_segment(name, "task name")
    except ContagentError as exc:
        raise ContagentError(f"{file}: [task] name: {exc}") from None
    instruction = read_text(root / "instruction.md", INSTRUCTION_LIMIT_BYTES, "instruction")
    if not instruction.strip():
        raise ContagentError(f"{root / 'instruction.md'}: empty")
    if not (root / "tests" / "test.sh").is_file():
        raise ContagentError(f"{root / 'tests' / 'test.sh'}: missing")
    env_dir = root / "environment"
    if env.docker_image is None and not (env_dir / "Dockerfile").is_file():
        raise ContagentError(f"{env_dir / 'Dockerfile'}: missing (and no docker_image)")
    for what, path in (("workdir", env.workdir), ("skills_dir", env.skills_dir)):
        if path is not None and not path.startswith("/"):
            raise ContagentError(f"{file}: [environment] {what} {path!r} is not absolute")
    return name, instruction


def load_harbor_task(root: Path, task_env: frozenset[str] = frozenset()) -> HarborTask:
    """Load and check one Harbor task folder; :class:`ContagentError` names file and field."""
    root = Path(root)
    file = root / TASK_FILE
    cfg = _read_task_toml(file)
    env = cfg.environment
    agent_net, _ = _network(cfg.agent, env, env.allow_internet)
    verifier_net, verifier_hosts = _network(cfg.verifier, env, env.allow_internet)
    if verifier_net == "allowlist":
        raise ContagentError(
            f"{file}: verifier network_mode = 'allowlist' is not supported by contagent "
            f"(hosts {', '.join(verifier_hosts) or 'none'})"
        )
    memory_mb, storage_mb = _sizes(file, env)
    name, instruction = _checked_folder(root, file, cfg)
    env_dir = root / "environment"
    hc = env.healthcheck
    return HarborTask(
        name=name,
        root=root,
        spec=ExperimentSpec(task=instruction),
        docker_image=env.docker_image,
        environment_hash=environment_hash(env_dir) if env_dir.is_dir() else "",
        agent_timeout_s=cfg.agent.timeout_sec,
        verifier_timeout_s=cfg.verifier.timeout_sec or DEFAULT_VERIFIER_TIMEOUT_S,
        build_timeout_s=env.build_timeout_sec,
        cpus=env.cpus,
        memory_mb=memory_mb,
        storage_mb=storage_mb,
        workdir=env.workdir,
        env=expand_env(env.env, task_env, f"{file}: [environment] env"),
        verifier_env=expand_env(cfg.verifier.env, task_env, f"{file}: [verifier] env"),
        solution_env=expand_env(cfg.solution.env, task_env, f"{file}: [solution] env"),
        agent_user=_user(cfg.agent.user),
        verifier_user=_user(cfg.verifier.user),
        healthcheck=None
        if hc is None
        else Healthcheck(
            hc.command,
            hc.interval_sec,
            hc.timeout_sec,
            hc.start_period_sec,
            hc.start_interval_sec,
            hc.retries,
        ),
        agent_network=agent_net,
        verifier_network=verifier_net,
        skills_path=env.skills_dir.rstrip("/") or "/" if env.skills_dir else None,
    )
