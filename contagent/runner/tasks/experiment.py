"""Experiments: the folder format users already have, loaded and checked.

::

    experiments/<name>/
    ├── experiment.json          task (required), skills, cap_add, services
    ├── setup.sh                 run in the runner container before the agent
    ├── evaluate.sh              run after the agent; exit code 0 is a pass
    ├── workspace/               copied to ~/workspace in the runner container
    └── <svc>_entrypoint.sh      optional, mounted into a service container

``experiment.json`` is validated against ``schemas/experiment.schema.json``
(generated from :class:`ExperimentSpec`); problems name the file and the JSON
path. Names that would leave their folder are refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

import jsonschema
from pydantic import BaseModel, ConfigDict, Field

from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.model_schema import model_schema
from contagent.versions import check_version, version_field

EXPERIMENT_FILE = "experiment.json"

#: Linux capability names Docker accepts in cap_add (with or without ``CAP_``).
_CAP_PATTERN = r"^(CAP_)?[A-Z][A-Z_]{1,40}$"
#: Service names become DNS host names on the rollout network.
_HOST_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"


class ServiceSpec(BaseModel):
    """A container started beside the runner, reachable by ``name`` as host name."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        pattern=_HOST_PATTERN,
        description="Host name of the service on the rollout network (lower-case DNS label).",
    )
    image: str = Field(
        min_length=1,
        description="Docker image the service runs (must exist locally or be pullable).",
    )
    entrypoint_script: str | None = Field(
        None,
        min_length=1,
        description="File in the experiment folder, mounted read-only and run with sh as the service's command.",
    )
    environment: dict[str, str] = Field(
        default_factory=dict, description="Environment variables of the service container."
    )


#: ``experiment.json``'s version: a reader takes 1 up to it (:mod:`contagent.versions`).
EXPERIMENT_SCHEMA_VERSION = 1


class ExperimentSpec(BaseModel):
    """``experiment.json``: what the agent is asked and what it runs beside."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = version_field(EXPERIMENT_SCHEMA_VERSION, "experiment.json")
    task: str = Field(
        min_length=1, description="The instruction sent to the agent as its first message."
    )
    skills: list[str] = Field(
        default_factory=list,
        description="Names of skill folders under the skills directory; only these are given to the agent.",
    )
    cap_add: list[Annotated[str, Field(pattern=_CAP_PATTERN)]] = Field(
        default_factory=list,
        description="Linux capabilities added to the runner container, e.g. NET_ADMIN.",
    )
    services: list[ServiceSpec] = Field(
        default_factory=list, description="Service containers on the rollout's network."
    )


#: experiment.json's schema, as committed under ``schemas/``
EXPERIMENT_SCHEMA_FILE = "experiment.schema.json"


@lru_cache(maxsize=1)
def experiment_schema() -> dict[str, Any]:
    """The JSON Schema experiment.json is checked against (same as schemas/experiment.schema.json)."""
    return model_schema(ExperimentSpec, EXPERIMENT_SCHEMA_FILE)


def _json_path(path: Any) -> str:
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


@dataclass(frozen=True)
class Experiment:
    """One loaded, checked experiment folder."""

    name: str
    root: Path
    spec: ExperimentSpec
    skill_dirs: tuple[Path, ...] = field(default_factory=tuple)
    kind: str = "seed"
    has_solution: bool = False
    wants_internet: bool = False  # the rollout network is isolated; it asks for nothing else

    @property
    def setup_script(self) -> Path:
        return self.root / "setup.sh"

    @property
    def evaluate_script(self) -> Path:
        return self.root / "evaluate.sh"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def skills_wanted(self) -> tuple[str, ...]:
        return tuple(self.spec.skills)

    def entrypoint_path(self, service: ServiceSpec) -> Path | None:
        if service.entrypoint_script is None:
            return None
        return self.root / service.entrypoint_script


def _inside(child: Path, parent: Path) -> bool:
    try:
        child.resolve().relative_to(parent.resolve())
    except ValueError:
        return False
    return True


def load_experiment(root: Path, skills_dir: Path | None) -> Experiment:
    """Load and check ``root/experiment.json``; raise :class:`ContagentError` naming file and path."""
    root = Path(root)
    name = safe_segment(root.name, "experiment name")
    file = root / EXPERIMENT_FILE
    spec = _read_spec(file)
    for script in ("setup.sh", "evaluate.sh"):
        if not (root / script).is_file():
            raise ContagentError(f"{root / script}: missing")
    _check_services(root, file, spec)
    skill_dirs = _skill_dirs(file, spec, skills_dir)
    return Experiment(name=name, root=root, spec=spec, skill_dirs=skill_dirs)


def _read_spec(file: Path) -> ExperimentSpec:
    """``experiment.json`` read and checked against its schema."""
    if not file.is_file():
        raise ContagentError(f"{file}: missing (every experiment folder needs one)")
    try:
        raw = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError as exc:
        raise ContagentError(f"{file}: not UTF-8 text ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        raise ContagentError(
            f"{file}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if isinstance(raw, dict):
        check_version(raw.get("schema_version", 1), EXPERIMENT_SCHEMA_VERSION, str(file))
    validator = jsonschema.Draft202012Validator(experiment_schema())
    errors = sorted(validator.iter_errors(raw), key=lambda e: (list(e.absolute_path), e.message))
    if errors:
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise ContagentError(f"{file}: {_json_path(first.absolute_path)}: {first.message}{more}")
    return ExperimentSpec.model_validate(raw)


def _check_services(root: Path, file: Path, spec: ExperimentSpec) -> None:
    """Service names are unique, and each entrypoint script is a file inside ``root``."""
    seen: set[str] = set()
    for i, svc in enumerate(spec.services):
        if svc.name in seen:
            raise ContagentError(
                f"{file}: $.services[{i}].name: duplicate service name {svc.name!r}"
            )
        seen.add(svc.name)
        if svc.entrypoint_script is not None:
            entry = root / svc.entrypoint_script
            if Path(svc.entrypoint_script).is_absolute() or not _inside(entry, root):
                raise ContagentError(
                    f"{file}: $.services[{i}].entrypoint_script: {svc.entrypoint_script!r} "
                    "leaves the experiment folder"
                )
            if not entry.is_file():
                raise ContagentError(
                    f"{file}: $.services[{i}].entrypoint_script: {entry} does not exist"
                )


def _skill_dirs(file: Path, spec: ExperimentSpec, skills_dir: Path | None) -> tuple[Path, ...]:
    """The folder of each skill the experiment lists, each checked to hold a SKILL.md."""
    skill_dirs: list[Path] = []
    for i, skill in enumerate(spec.skills):
        try:
            safe_segment(skill, "skill name")
        except ContagentError as exc:
            raise ContagentError(f"{file}: $.skills[{i}]: {exc}") from None
        if skills_dir is None:
            raise ContagentError(
                f"{file}: $.skills[{i}]: skill {skill!r} listed but no --skills-dir"
            )
        skill_dir = Path(skills_dir) / skill
        if not _inside(skill_dir, Path(skills_dir)):
            raise ContagentError(f"{file}: $.skills[{i}]: {skill!r} leaves the skills directory")
        if not (skill_dir / "SKILL.md").is_file():
            raise ContagentError(f"{file}: $.skills[{i}]: no {skill_dir / 'SKILL.md'}")
        skill_dirs.append(skill_dir)
    return tuple(skill_dirs)


@dataclass(frozen=True)
class ExperimentProblem:
    """An experiment that could not be loaded: reported, skipped, the others still run."""

    name: str
    message: str
    #: the agent it cannot run with (its other agents' rollouts still run); None: every agent
    agent: str | None = None


def experiment_roots(experiments_dir: Path, names: list[str] | None) -> list[Path]:
    """The folders under ``experiments_dir`` (or only ``names``), sorted by name, once each."""
    experiments_dir = Path(experiments_dir)
    if not experiments_dir.is_dir():
        raise ContagentError(f"{experiments_dir}: experiments directory not found")
    if names:
        roots: list[Path] = []
        for name in names:
            safe_segment(name, "experiment name")
            root = experiments_dir / name
            if not root.is_dir():
                raise ContagentError(f"{root}: no such experiment")
            roots.append(root)
    else:
        roots = sorted(
            p for p in experiments_dir.iterdir() if p.is_dir() and not p.name.startswith(".")
        )
    return list(dict.fromkeys(roots))


def discover_experiments(
    experiments_dir: Path, names: list[str] | None, skills_dir: Path | None
) -> tuple[list[Experiment], list[ExperimentProblem]]:
    """Load every experiment under ``experiments_dir`` (or only ``names``), sorted by name."""
    roots = experiment_roots(experiments_dir, names)
    loaded: list[Experiment] = []
    problems: list[ExperimentProblem] = []
    for root in roots:
        try:
            loaded.append(load_experiment(root, skills_dir))
        except ContagentError as exc:
            problems.append(ExperimentProblem(name=root.name, message=str(exc)))
    return loaded, problems
